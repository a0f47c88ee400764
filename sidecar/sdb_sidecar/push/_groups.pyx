# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""An interval's samples grouped as the push thread takes them, in C: each samples record the
sampler encoded (native/encode.c's msgpack) is read here straight from its bytes (read_samples), and
its samples are counted by (process, thread, stack, state, span), the key every push profile's
samples are told apart by, their times kept by group (SampleGroups). No Python object is made per
sample: the profile library then works per group (sdb_symbolize.grouped), a few thousand an
interval at 1 kHz x 12 threads instead of ~60,000 samples.

A record read_samples does not recognise whole (another writer's layout, a sample type or values, a
number out of range) gives None: the caller decodes it with msgpack and its interval takes the
per-sample path, so nothing is ever counted differently from the trace file."""
from cpython.array cimport array, clone
from libc.stdint cimport int64_t, uint8_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcmp, memset

cdef array _Q_TEMPLATE = array("q")
cdef int64_t _INT64_MAX = 0x7FFFFFFFFFFFFFFF


cdef struct Reader:
    const uint8_t *p
    const uint8_t *end
    bint bad


cdef inline uint64_t _be(Reader *r, int n) noexcept nogil:
    cdef uint64_t v = 0
    cdef int i
    if r.end - r.p < n:
        r.bad = True
        return 0
    for i in range(n):
        v = (v << 8) | r.p[i]
    r.p += n
    return v


cdef inline uint8_t _byte(Reader *r) noexcept nogil:
    if r.p >= r.end:
        r.bad = True
        return 0
    r.p += 1
    return (r.p - 1)[0]


cdef inline uint64_t _uint(Reader *r) noexcept nogil:
    """A msgpack unsigned integer (positive fixint, uint 8-64); bad for anything else."""
    cdef uint8_t b = _byte(r)
    if b < 0x80:
        return b
    if b >= 0xcc and b <= 0xcf:
        return _be(r, 1 << (b - 0xcc))
    r.bad = True
    return 0


cdef inline int64_t _int(Reader *r) noexcept nogil:
    """A msgpack integer that fits in int64 (fixints, uint 8-64, int 8-64); bad for anything else."""
    cdef uint8_t b = _byte(r)
    cdef uint64_t v
    cdef int n
    if b < 0x80:
        return b
    if b >= 0xe0:
        return <int64_t>b - 256
    if b >= 0xcc and b <= 0xcf:
        v = _be(r, 1 << (b - 0xcc))
        if v > <uint64_t>_INT64_MAX:
            r.bad = True
        return <int64_t>v
    if b >= 0xd0 and b <= 0xd3:
        n = 1 << (b - 0xd0)
        v = _be(r, n)
        if n < 8 and v >> (8 * n - 1):
            v |= ~((<uint64_t>1 << (8 * n)) - 1)       # sign-extend
        return <int64_t>v
    r.bad = True
    return 0


cdef inline Py_ssize_t _array(Reader *r) noexcept nogil:
    cdef uint8_t b = _byte(r)
    if b >= 0x90 and b <= 0x9f:
        return b & 0x0f
    if b == 0xdc:
        return <Py_ssize_t>_be(r, 2)
    if b == 0xdd:
        return <Py_ssize_t>_be(r, 4)
    r.bad = True
    return 0


cdef inline bint _key(Reader *r, const char *name, Py_ssize_t n) noexcept nogil:
    """The next string is `name` (n bytes): consumed if so."""
    if r.end - r.p < n + 1 or r.p[0] != (0xa0 | n) or memcmp(r.p + 1, name, n) != 0:
        return False
    r.p += n + 1
    return True


cdef object _name(Reader *r, bytes data):
    """The next string (a key of the map; a fixstr) as bytes, or None."""
    cdef Py_ssize_t at = r.p - <const uint8_t *>data, n
    if r.p >= r.end or r.p[0] < 0xa0 or r.p[0] > 0xbf:
        return None
    n = r.p[0] - 0xa0                   # msgpack's fixstr: 0xa0 + its length (0-31)
    if r.end - r.p < n + 1:
        return None
    r.p += n + 1
    return data[at + 1:at + 1 + n]


# the columns of a samples record that make a group's key (native/encode.h: sdb_sample)
DEF THREAD = 0
DEF STACK = 1
DEF STATE = 2
DEF SPAN = 3
DEF KEYS = 4
KEY_COLUMNS = {b"thread": THREAD, b"stack": STACK, b"state": STATE, b"span": SPAN}


cdef class SamplesRecord:
    """One samples record read whole: n samples, each with its time (base_ns + dt) and its key
    columns; lo and hi, its first and last times."""
    cdef uint64_t *cols[KEYS]
    cdef int64_t *t
    cdef readonly Py_ssize_t n
    cdef readonly int64_t lo, hi

    def __dealloc__(self):
        cdef int k
        for k in range(KEYS):
            free(self.cols[k])
        free(self.t)


cdef int _column(Reader *r, SamplesRecord rec, uint64_t **out, bint signed_) except -1:
    """1: an array of n integers read into out[0]; 0: not one."""
    cdef Py_ssize_t i, n = _array(r)
    if r.bad or n == 0 or (rec.n and n != rec.n) or out[0] != NULL:
        return 0                # empty, lengths that differ or a column twice: not the sampler's
    rec.n = n
    out[0] = <uint64_t *>malloc(n * sizeof(uint64_t))
    if out[0] == NULL:
        raise MemoryError()
    for i in range(n):
        out[0][i] = <uint64_t>_int(r) if signed_ else _uint(r)
    return 0 if r.bad else 1


def read_samples(bytes data):
    """The samples record in data (one whole msgpack map: {"t": "samples", "base_ns", "dt_ns",
    "thread", "stack", "state", "win_us", "span", "tick"}, in any order; win_us, span, tick may be
    absent), or None when data is not such a record (then decode it: every sample still counts)."""
    cdef Reader r
    cdef SamplesRecord rec = SamplesRecord()
    cdef uint64_t *dt = NULL
    cdef uint64_t *skip = NULL
    cdef uint64_t **out
    cdef uint64_t base = 0
    cdef bint has_base = False, is_samples = False
    cdef Py_ssize_t i, keys
    cdef uint8_t b
    cdef int64_t t
    r.p = <const uint8_t *>data
    r.end = r.p + len(data)
    r.bad = False
    b = _byte(&r)
    if r.bad or b < 0x80 or b > 0x8f:
        return None
    keys = b & 0x0f
    try:
        for i in range(keys):
            name = _name(&r, data)
            if name == b"t":
                if not _key(&r, "samples", 7):
                    return None
                is_samples = True
            elif name == b"base_ns":
                base = _uint(&r)
                has_base = True
            else:
                if name == b"dt_ns":
                    out = &dt
                elif name in KEY_COLUMNS:
                    out = &rec.cols[<int>KEY_COLUMNS[name]]
                elif name == b"win_us" or name == b"tick":     # not part of a group's key
                    free(skip)
                    skip = NULL
                    out = &skip
                else:
                    return None     # a sample type, values, or a key the sampler does not write
                if not _column(&r, rec, out, out == &dt):
                    return None
        if r.bad or r.p != r.end or not is_samples or not has_base or base > <uint64_t>_INT64_MAX \
                or dt == NULL or rec.cols[THREAD] == NULL or rec.cols[STACK] == NULL or rec.cols[STATE] == NULL:
            return None
        if rec.cols[SPAN] == NULL:      # no span column: every sample in none
            rec.cols[SPAN] = <uint64_t *>malloc(rec.n * sizeof(uint64_t))
            if rec.cols[SPAN] == NULL:
                raise MemoryError()
            memset(rec.cols[SPAN], 0, rec.n * sizeof(uint64_t))
        rec.t = <int64_t *>malloc(rec.n * sizeof(int64_t))
        if rec.t == NULL:
            raise MemoryError()
        for i in range(rec.n):
            if <int64_t>dt[i] > 0 and <int64_t>base > _INT64_MAX - <int64_t>dt[i]:
                return None     # a time past int64 (no clock gives one): the per-sample path clamps it
            t = <int64_t>base + <int64_t>dt[i]
            rec.t[i] = t
            if i == 0 or t < rec.lo:
                rec.lo = t
            if i == 0 or t > rec.hi:
                rec.hi = t
        return rec
    finally:
        free(dt)
        free(skip)


cdef struct Group:
    uint64_t proc
    uint64_t key[KEYS]
    uint64_t count


cdef inline uint64_t _mix(uint64_t h, uint64_t v) noexcept nogil:
    h ^= v + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2)
    return h * 0xBF58476D1CE4E5B9ULL


cdef class SampleGroups:
    """The samples of an interval by (process, thread, stack, state, span), in the order each group
    was first seen (the order the per-sample path meets them), each with its count and its
    samples' times (`times`, in the order they came)."""
    cdef Group *groups
    cdef Py_ssize_t n_groups, cap_groups
    cdef Py_ssize_t *slots          # open addressing: a group's index + 1, 0 empty
    cdef Py_ssize_t n_slots         # a power of two, at least twice n_groups
    cdef Py_ssize_t *of_sample      # each sample's group, in the order they came
    cdef int64_t *t_sample          # and its time
    cdef Py_ssize_t n_samples, cap_samples

    def __dealloc__(self):
        free(self.groups)
        free(self.slots)
        free(self.of_sample)
        free(self.t_sample)

    @property
    def samples(self):
        return self.n_samples

    def clear(self):
        """Empty for the next interval (the memory stays for it)."""
        self.n_groups = 0
        self.n_samples = 0
        if self.slots != NULL:
            memset(self.slots, 0, self.n_slots * sizeof(Py_ssize_t))

    cdef int _grow_slots(self) except -1:
        cdef Py_ssize_t n = 1024 if self.n_slots == 0 else self.n_slots * 2, g
        cdef Py_ssize_t *slots = <Py_ssize_t *>malloc(n * sizeof(Py_ssize_t))
        if slots == NULL:
            raise MemoryError()
        memset(slots, 0, n * sizeof(Py_ssize_t))
        free(self.slots)
        self.slots, self.n_slots = slots, n
        for g in range(self.n_groups):
            self._place(self._hash(&self.groups[g]), g)
        return 0

    cdef inline uint64_t _hash(self, const Group *g) noexcept nogil:
        cdef uint64_t h = _mix(0, g.proc)
        cdef int k
        for k in range(KEYS):
            h = _mix(h, g.key[k])
        return h

    cdef inline void _place(self, uint64_t h, Py_ssize_t g) noexcept nogil:
        cdef Py_ssize_t mask = self.n_slots - 1, s = <Py_ssize_t>(h & <uint64_t>mask)
        while self.slots[s]:
            s = (s + 1) & mask
        self.slots[s] = g + 1

    cdef Py_ssize_t _find(self, Group *probe) except -1:
        """The index of probe's group (made, count 0, if new)."""
        cdef uint64_t h
        cdef Py_ssize_t mask, s, g
        cdef Group *grown
        if 2 * (self.n_groups + 1) > self.n_slots:
            self._grow_slots()
        h = self._hash(probe)
        mask = self.n_slots - 1
        s = <Py_ssize_t>(h & <uint64_t>mask)
        while self.slots[s]:
            g = self.slots[s] - 1
            if self.groups[g].proc == probe.proc and memcmp(self.groups[g].key, probe.key, sizeof(probe.key)) == 0:
                return g
            s = (s + 1) & mask
        if self.n_groups == self.cap_groups:
            self.cap_groups = 256 if self.cap_groups == 0 else self.cap_groups * 2
            grown = <Group *>realloc(self.groups, self.cap_groups * sizeof(Group))
            if grown == NULL:
                raise MemoryError()
            self.groups = grown
        g = self.n_groups
        self.n_groups += 1
        self.groups[g] = probe[0]
        self.groups[g].count = 0
        self.slots[s] = g + 1
        return g

    def add(self, SamplesRecord rec, uint64_t proc):
        """rec's samples, of process proc (the trace's `in`), into their groups."""
        cdef Py_ssize_t i, g, need = self.n_samples + rec.n, cap
        cdef Group probe
        cdef int k
        cdef void *grown
        if need > self.cap_samples:
            cap = max(need, 2 * self.cap_samples, 4096)
            grown = realloc(self.of_sample, cap * sizeof(Py_ssize_t))
            if grown == NULL:
                raise MemoryError()
            self.of_sample = <Py_ssize_t *>grown
            grown = realloc(self.t_sample, cap * sizeof(int64_t))
            if grown == NULL:
                raise MemoryError()
            self.t_sample = <int64_t *>grown
            self.cap_samples = cap
        probe.proc = proc
        for i in range(rec.n):
            for k in range(KEYS):
                probe.key[k] = rec.cols[k][i]
            g = self._find(&probe)
            self.groups[g].count += 1
            self.of_sample[self.n_samples] = g
            self.t_sample[self.n_samples] = rec.t[i]
            self.n_samples += 1

    def keys(self):
        """[(proc, thread, stack, state, span, count)], a tuple per group, first seen first."""
        cdef Py_ssize_t g
        cdef Group *x
        out = []
        for g in range(self.n_groups):
            x = &self.groups[g]
            out.append((x.proc, x.key[THREAD], x.key[STACK], x.key[STATE], x.key[SPAN], x.count))
        return out

    def times(self):
        """[array('q')], per group in keys()' order: its samples' times (CLOCK_MONOTONIC ns), in the
        order they came."""
        cdef Py_ssize_t g, i, n = self.n_groups
        cdef int64_t **out = <int64_t **>malloc((n + 1) * sizeof(int64_t *))
        cdef array a
        if out == NULL:
            raise MemoryError()
        try:
            arrays = []
            for g in range(n):
                a = clone(_Q_TEMPLATE, self.groups[g].count, False)
                arrays.append(a)
                out[g] = <int64_t *>a.data.as_voidptr
            for i in range(self.n_samples):
                g = self.of_sample[i]
                out[g][0] = self.t_sample[i]
                out[g] += 1
            return arrays
        finally:
            free(out)
