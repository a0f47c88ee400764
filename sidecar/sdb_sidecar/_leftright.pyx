# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""A left-right map: u64 key -> u64 value, read without locks, the GIL or waiting.

Groundwork for the eBPF symbolizer (issue #4): its event thread writes which ISeq addresses are
named; the sampler's nogil loop reads that to know which ISeqs need no remote read.

Left-right (Ramalhete & Correia): two copies of the table. Readers announce themselves on the read
indicator of the current version, then read the copy `left_or_right` points at, then leave: a few
atomic increments, never a wait, never a lock. The one writer (writers are serialised by a mutex)
changes the copy no reader uses, points readers at it, waits until the readers of the old version
are gone (toggling the version in between, so a steady stream of new readers cannot starve it),
then brings the other copy up to date. A reader therefore never sees an entry being written.
"""
from libc.stdint cimport uint64_t, int64_t
from libc.stdlib cimport calloc, malloc, free

cdef extern from "<pthread.h>" nogil:
    int pthread_mutex_init(pthread_mutex_t *m, void *attr)
    int pthread_mutex_lock(pthread_mutex_t *m)
    int pthread_mutex_unlock(pthread_mutex_t *m)
    int pthread_create(pthread_t *t, void *attr, void *(*fn)(void *) noexcept nogil, void *arg)
    int pthread_join(pthread_t t, void **ret)

cdef extern from "<sched.h>" nogil:
    int sched_yield()

cdef extern from "_sampler_util.h" nogil:
    uint64_t sdb_now_ns()
    uint64_t sdb_mix64(uint64_t x)
    uint64_t sdb_xorshift(uint64_t *s)

cdef extern from *:
    """
    static inline long sdb_lr_load(const volatile long *p) { return __atomic_load_n((const long *)p, __ATOMIC_SEQ_CST); }
    static inline void sdb_lr_store(volatile long *p, long v) { __atomic_store_n((long *)p, v, __ATOMIC_SEQ_CST); }
    static inline void sdb_lr_add(volatile long *p, long v) { __atomic_fetch_add((long *)p, v, __ATOMIC_SEQ_CST); }
    """
    long sdb_lr_load(const long *p) nogil
    void sdb_lr_store(long *p, long v) nogil
    void sdb_lr_add(long *p, long v) nogil

# Table, LR and the LeftRightMap class are declared in _leftright.pxd (the sampler cimports them)


cdef int table_init(Table *t, uint64_t cap) noexcept nogil:
    t.keys = <uint64_t *>calloc(cap, sizeof(uint64_t))
    t.vals = <uint64_t *>calloc(cap, sizeof(uint64_t))
    t.cap = cap
    t.count = 0
    return 0 if t.keys != NULL and t.vals != NULL else -1


cdef void table_free(Table *t) noexcept nogil:
    free(t.keys)
    free(t.vals)
    t.keys = NULL
    t.vals = NULL


cdef int table_put(Table *t, uint64_t k, uint64_t v) noexcept nogil:
    """Insert or overwrite; grows at half full. Only ever called on the copy no reader uses."""
    cdef uint64_t i, j, mask
    cdef Table bigger
    if (t.count + 1) * 2 > t.cap:
        if table_init(&bigger, t.cap * 2) != 0:
            table_free(&bigger)
            return -1
        for j in range(t.cap):
            if t.keys[j] != 0:
                table_put(&bigger, t.keys[j], t.vals[j])
        table_free(t)
        t[0] = bigger
    mask = t.cap - 1
    i = sdb_mix64(k) & mask
    while t.keys[i] != 0 and t.keys[i] != k:
        i = (i + 1) & mask
    if t.keys[i] == 0:
        t.count += 1
    t.vals[i] = v          # value before key: a half-written slot has no key yet (belt and braces)
    t.keys[i] = k
    return 0


cdef inline int table_get(const Table *t, uint64_t k, uint64_t *v) noexcept nogil:
    cdef uint64_t mask = t.cap - 1
    cdef uint64_t i = sdb_mix64(k) & mask
    while t.keys[i] != 0:
        if t.keys[i] == k:
            v[0] = t.vals[i]
            return 1
        i = (i + 1) & mask
    return 0


cdef int lr_get(LR *m, uint64_t k, uint64_t *v) noexcept nogil:
    """Wait-free read (no lock, no GIL). 1 if k is in the map (its value in v)."""
    cdef long vi = sdb_lr_load(&m.version_index)
    cdef int found
    sdb_lr_add(&m.readers[vi], 1)
    found = table_get(&m.tables[sdb_lr_load(&m.left_or_right)], k, v)
    sdb_lr_add(&m.readers[vi], -1)
    return found


cdef void lr_wait_for_readers(LR *m, long vi) noexcept nogil:
    while sdb_lr_load(&m.readers[vi]) != 0:
        m.waits += 1
        sched_yield()


cdef int lr_put_many(LR *m, const uint64_t *ks, const uint64_t *vs, uint64_t n) noexcept nogil:
    """Apply n writes as one batch: readers see all of them at once, or none."""
    cdef long lr, vi
    cdef uint64_t i
    if n == 0:
        return 0
    pthread_mutex_lock(&m.writer)
    lr = sdb_lr_load(&m.left_or_right)
    for i in range(n):
        if table_put(&m.tables[1 - lr], ks[i], vs[i]) != 0:
            pthread_mutex_unlock(&m.writer)
            return -1
    sdb_lr_store(&m.left_or_right, 1 - lr)        # new readers read the updated copy
    vi = sdb_lr_load(&m.version_index)
    lr_wait_for_readers(m, 1 - vi)
    sdb_lr_store(&m.version_index, 1 - vi)
    lr_wait_for_readers(m, vi)                     # nobody reads the old copy now
    for i in range(n):
        table_put(&m.tables[lr], ks[i], vs[i])     # cannot fail: same keys, same growth
    m.writes += n
    pthread_mutex_unlock(&m.writer)
    return 0


cdef class LeftRightMap:
    def __cinit__(self, uint64_t capacity=1024):
        cdef uint64_t cap = 16
        while cap < capacity * 2:
            cap *= 2
        self.m = <LR *>calloc(1, sizeof(LR))
        if (self.m == NULL or table_init(&self.m.tables[0], cap) != 0
                or table_init(&self.m.tables[1], cap) != 0):
            raise MemoryError()
        pthread_mutex_init(&self.m.writer, NULL)

    def __dealloc__(self):
        if self.m != NULL:
            table_free(&self.m.tables[0])
            table_free(&self.m.tables[1])
            free(self.m)

    def put(self, uint64_t key, uint64_t value):
        cdef int rc
        if key == 0:
            raise ValueError("key 0 is reserved")
        with nogil:
            rc = lr_put_many(self.m, &key, &value, 1)
        if rc != 0:
            raise MemoryError()

    def put_many(self, keys, values):
        """Write pairs as one batch (readers see all of them or none): one wait for readers per batch."""
        cdef uint64_t n = len(keys), i
        cdef uint64_t *ks
        cdef uint64_t *vs
        cdef int rc
        if n != <uint64_t>len(values):
            raise ValueError("keys and values differ in length")
        if n == 0:
            return
        ks = <uint64_t *>malloc(n * sizeof(uint64_t))
        vs = <uint64_t *>malloc(n * sizeof(uint64_t))
        if ks == NULL or vs == NULL:
            free(ks)
            free(vs)
            raise MemoryError()
        try:
            for i in range(n):
                ks[i] = keys[i]
                vs[i] = values[i]
                if ks[i] == 0:
                    raise ValueError("key 0 is reserved")
            with nogil:
                rc = lr_put_many(self.m, ks, vs, n)
        finally:
            free(ks)
            free(vs)
        if rc != 0:
            raise MemoryError()

    def lookup(self, uint64_t key):
        cdef uint64_t v = 0
        cdef int found
        with nogil:
            found = lr_get(self.m, key, &v)
        return v if found else None

    def __len__(self):
        return self.m.tables[sdb_lr_load(&self.m.left_or_right)].count

    @property
    def writer_waits(self):
        return self.m.waits


# ------------------------------------------------------------------ stress test
cdef struct StressArgs:
    LR *map
    long *published           # keys 1..published are fully written
    long *stop
    uint64_t seed
    uint64_t reads
    uint64_t torn             # a value that does not match its key
    uint64_t missing          # a key published but not found
    uint64_t batch
    uint64_t nkeys


cdef uint64_t STRESS_MAGIC = 0x5DB5DB5DB5DB5DB5ULL


cdef void *stress_reader(void *p) noexcept nogil:
    cdef StressArgs *a = <StressArgs *>p
    cdef uint64_t v, k, pub, s = a.seed | 1
    while not sdb_lr_load(a.stop):
        pub = <uint64_t>sdb_lr_load(a.published)
        if pub == 0:
            continue
        k = sdb_xorshift(&s) % pub + 1
        if lr_get(a.map, k, &v):
            if v != (k ^ STRESS_MAGIC):
                a.torn += 1
        else:
            a.missing += 1
        a.reads += 1
    return NULL


cdef void *stress_writer(void *p) noexcept nogil:
    cdef StressArgs *a = <StressArgs *>p
    cdef uint64_t ks[256]
    cdef uint64_t vs[256]
    cdef uint64_t k = 1, i, n
    while not sdb_lr_load(a.stop) and k <= a.nkeys:
        n = a.batch if a.batch <= 256 else 256
        for i in range(n):
            ks[i] = k + i
            vs[i] = (k + i) ^ STRESS_MAGIC
        if lr_put_many(a.map, ks, vs, n) != 0:
            break
        k += n
        sdb_lr_store(a.published, <long>(k - 1))
    return NULL


def stress(int readers=3, double seconds=2.0, uint64_t nkeys=2000000, uint64_t batch=16):
    """One writer inserting keys 1..nkeys in batches, `readers` threads looking up random published
    keys, all without the GIL. Returns counts: reads, writes, torn (wrong value), missing (a
    published key not found), writer waits."""
    cdef LeftRightMap m = LeftRightMap(1024)
    cdef long published = 0, stop = 0
    cdef StressArgs args[17]
    cdef pthread_t tids[17]
    cdef int i, n = min(max(readers, 1), 16)
    cdef uint64_t deadline
    for i in range(n + 1):
        args[i].map = m.m
        args[i].published = &published
        args[i].stop = &stop
        args[i].seed = 0x9E3779B97F4A7C15ULL * (i + 1)
        args[i].reads = args[i].torn = args[i].missing = 0
        args[i].batch = batch
        args[i].nkeys = nkeys
    with nogil:
        for i in range(n):
            pthread_create(&tids[i], NULL, stress_reader, &args[i])
        pthread_create(&tids[n], NULL, stress_writer, &args[n])
        deadline = sdb_now_ns() + <uint64_t>(seconds * 1e9)
        while sdb_now_ns() < deadline and <uint64_t>sdb_lr_load(&published) < nkeys:
            sched_yield()
        sdb_lr_store(&stop, 1)
        for i in range(n + 1):
            pthread_join(tids[i], NULL)
    return {"reads": sum(args[i].reads for i in range(n)), "torn": sum(args[i].torn for i in range(n)),
            "missing": sum(args[i].missing for i in range(n)), "writes": m.m.writes,
            "writer_waits": m.m.waits, "keys": len(m), "readers": n}
