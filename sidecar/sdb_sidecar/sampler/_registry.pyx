# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The registry the gem publishes in /dev/shm/sdb-<pid> (docs/registry-format.md), mapped read-only:
its header checked once (`Registry.check`), its live slots (`threads`), span ring (`read_spans`) and
string table (`string_at`). The sampler reads the slots itself, through the fields declared in
_registry.pxd."""
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy
from posix.fcntl cimport open as c_open, O_RDONLY
from posix.unistd cimport close as c_close
from posix.mman cimport mmap, munmap, PROT_READ, MAP_SHARED, MAP_FAILED
from posix.stat cimport struct_stat, fstat
from sdb_sidecar.sampler._util cimport sdb_errno, sdb_load_acquire_u64, sdb_load_acquire_u32, sdb_fence_acquire
from sdb_sidecar.sampler._types cimport LAYOUT_NA, EC_SPAN, ISEQ_SPAN, BODY_SPAN, BODY_SPAN_MAX, ME_SPAN, ENV_WORDS_MAX


class RegistryError(Exception):
    """The registry file cannot be used (message says why)."""


cdef object layout_problem(const sdb_layout *L):
    """None when every offset the nogil loop uses fits the buffer it indexes, else what does not.
    The layout lives in the target's shared memory like everything else: it is checked once here
    and the sampler keeps its own copy."""
    if L.cfp_size < 24 or L.cfp_size > 256 or L.cfp_size % 8:
        return f"control frame size {L.cfp_size}"
    if L.cfp_pc + 8 > L.cfp_size or L.cfp_iseq + 8 > L.cfp_size or L.cfp_ep + 8 > L.cfp_size \
            or (L.cfp_sp != LAYOUT_NA and L.cfp_sp + 8 > L.cfp_size):
        return "a control frame field lies outside the frame"
    if L.ec_vm_stack + 8 > EC_SPAN or L.ec_vm_stack_size + 8 > EC_SPAN or L.ec_cfp + 8 > EC_SPAN:
        return "an execution context field lies outside the span read"
    if L.iseq_body + 8 > ISEQ_SPAN or L.body_iseq_size + 4 > BODY_SPAN or L.body_iseq_encoded + 8 > BODY_SPAN \
            or L.body_type + 4 > BODY_SPAN \
            or (L.body_local_table_size != LAYOUT_NA and L.body_local_table_size + 4 > BODY_SPAN_MAX):
        return "an ISeq field lies outside the span read"
    if L.me_def + 8 > ME_SPAN or L.me_defined_class + 8 > ME_SPAN:
        return "a method entry field lies outside the span read"
    if max(L.env_me_cref, L.env_specval, L.env_flags) >= ENV_WORDS_MAX:
        return "a frame's env words lie further below ep than the sampler reads"
    return None


cdef class Registry:
    """The gem's registry, mapped read-only."""

    def __cinit__(self, str path):
        cdef struct_stat st
        cdef int fd
        cdef void *p
        self.base = NULL
        self.path = path
        fd = c_open(path.encode(), O_RDONLY)
        if fd < 0:
            raise OSError(sdb_errno(), "cannot open registry", path)
        if fstat(fd, &st) != 0 or <size_t>st.st_size < sizeof(sdb_header):
            c_close(fd)
            raise RegistryError(f"{path} is too small to be an sdb registry")
        p = mmap(NULL, st.st_size, PROT_READ, MAP_SHARED, fd, 0)
        c_close(fd)
        if p == MAP_FAILED:
            raise OSError(sdb_errno(), "cannot map registry", path)
        self.base = <const uint8_t *>p
        self.size = st.st_size
        self.hdr = <const sdb_header *>p
        self.slot_count = self.hdr.slot_count
        self.slot_size = self.hdr.slot_size
        self.slots_offset = self.hdr.slots_offset
        self.spans_offset = self.hdr.spans_offset
        self.span_count = self.hdr.span_count
        self.strings_offset = self.hdr.strings_offset
        self.strings_size = self.hdr.strings_size
        self.checked = 0

    def __dealloc__(self):
        if self.base != NULL:
            munmap(<void *>self.base, self.size)

    @property
    def magic(self):
        return bytes(self.hdr.magic[:8])

    @property
    def version(self):
        return self.hdr.version

    def check(self):
        """Raise RegistryError unless the sizes in the header are the ones this reader knows and the
        layout's offsets fit the spans the sampler reads."""
        if self.hdr.header_size != sizeof(sdb_header) or self.slot_size != sizeof(sdb_slot):
            raise RegistryError(f"{self.path}: header or slot size differs from this sidecar's "
                                f"({self.hdr.header_size}/{self.slot_size}, expected "
                                f"{sizeof(sdb_header)}/{sizeof(sdb_slot)})")
        if (self.slots_offset < sizeof(sdb_header)
                or <size_t>self.slots_offset + <size_t>self.slot_count * self.slot_size > self.size):
            raise RegistryError(f"{self.path}: file is shorter than its header says")
        if (self.span_count == 0 or self.span_count & (self.span_count - 1)
                or self.spans_offset < self.slots_offset + <size_t>self.slot_count * self.slot_size
                or <size_t>self.spans_offset + <size_t>self.span_count * sizeof(sdb_span_event) > self.strings_offset
                or <size_t>self.strings_offset + self.strings_size > self.size):
            raise RegistryError(f"{self.path}: its span ring or string table does not fit the file")
        # the layout counts once the gem says it checked it (a disabled gem leaves it empty)
        why = layout_problem(&self.hdr.layout) if self.hdr.status == SDB_STATUS_ENABLED else None
        if why is not None:
            raise RegistryError(f"{self.path}: the layout is not one this sidecar can read ({why})")
        self.checked = 1

    @property
    def gc_active_offset(self):
        """Where the header's gc_active word is in the file (the gem's GC hook keeps it, 3.3+)."""
        return <size_t>(<const uint8_t *>&self.hdr.gc_active - self.base)

    @property
    def layout(self):
        """The layout facts the gem published (struct sdb_layout as a dict)."""
        return self.hdr.layout

    @property
    def info(self):
        h = self.hdr
        return {
            "version": h.version, "pid": h.pid, "status": h.status, "slot_count": h.slot_count,
            "proc_start_ticks": h.proc_start_ticks, "created_mono_ns": h.created_mono_ns,
            "ruby": h.ruby_version.decode(errors="replace"),
            "ruby_description": h.ruby_description.decode(errors="replace"),
            "layout": h.layout_name.decode(errors="replace"),
            "disabled_reason": h.disabled_reason.decode(errors="replace"),
            "service": self.service_name,
        }

    def span_head(self):
        """How many span events the gem has written so far."""
        return sdb_load_acquire_u64(&self.hdr.span_head)

    def read_spans(self, uint64_t start):
        """The span events [start, head) still in the ring (docs/registry-format.md, "Spans"):
        (events, next, lost). events: (what, span, parent, thread_serial, at_ns, kind, endpoint id,
        status, request_id bytes), each copied whole (seq 2i+2 before and after the copy); lost:
        events overwritten before they could be read."""
        cdef uint64_t head = sdb_load_acquire_u64(&self.hdr.span_head), i, lost = 0, s1
        cdef const sdb_span_event *e
        cdef sdb_span_event c
        out = []
        if not self.checked:
            self.check()
        if head < start:            # not this registry's numbering (a new file at the path)
            return out, head, 0
        if head - start > self.span_count:
            lost = head - start - self.span_count
            start = head - self.span_count
        for i in range(start, head):
            e = <const sdb_span_event *>(self.base + self.spans_offset
                                         + <size_t>(i & (self.span_count - 1)) * sizeof(sdb_span_event))
            s1 = sdb_load_acquire_u64(&e.seq)
            memcpy(&c, <const void *>e, sizeof(sdb_span_event))
            sdb_fence_acquire()
            if s1 != 2 * i + 2 or sdb_load_acquire_u64(&e.seq) != s1:
                lost += 1           # being overwritten by a later event
                continue
            if c.what == SDB_SPAN_BEGIN:    # its request_id bytes hold the trace context
                ids = (<const char *>c.request_id)[:SDB_TRACE_SPAN_AT + SDB_TRACE_SPAN_LEN]
                rid = b""
            else:
                c.request_id[63] = 0
                rid = <bytes>c.request_id
                ids = None
            out.append((c.what, c.span, c.parent, c.thread_serial, c.at_ns, c.kind, c.endpoint, c.status,
                        rid, ids))
        return out, head, lost

    def string_at(self, uint32_t sid):
        """The string table's entry with id sid (its offset + 1), as bytes; None if it is not one."""
        cdef uint32_t used = sdb_load_acquire_u32(&self.hdr.strings_used)
        cdef uint32_t off, n
        if sid == 0 or sid - 1 + 4 > used or used > self.strings_size or (sid - 1) & 3:
            return None
        off = sid - 1
        memcpy(&n, self.base + self.strings_offset + off, 4)
        if n == 0 or <uint64_t>off + 4 + n > used:
            return None
        return (<const char *>(self.base + self.strings_offset + off + 4))[:n]

    @property
    def service_name(self):
        """The service name the app gave (SDB_SERVICE_NAME, else OTEL_SERVICE_NAME, read by the gem at
        require), None when it gave none."""
        name = self.hdr.service_name[:SDB_SERVICE_MAX].split(b"\0", 1)[0]
        return name.decode("utf-8", "replace") if name else None

    @property
    def strings_refused(self):
        return self.hdr.strings_refused

    def threads(self):
        """The live slots right now: a list of dicts (seqlock-checked copies)."""
        out = []
        cdef const sdb_slot *s
        cdef sdb_slot copy
        cdef uint64_t gen
        cdef uint32_t i
        if not self.checked:
            self.check()
        for i in range(self.slot_count):
            s = <const sdb_slot *>(self.base + self.slots_offset + <size_t>i * self.slot_size)
            if not copy_slot(s, &copy, &gen, 100):
                continue
            if copy.live:
                out.append({"slot": i, "serial": copy.serial, "tid": copy.native_tid,
                            "name": copy.name[:SDB_NAME_MAX].split(b"\0", 1)[0].decode(errors="replace"),
                            "start_ns": copy.start_mono_ns, "flags": copy.flags, "state": copy.state,
                            "thread_addr": copy.thread_addr, "ec_addr": copy.ec_addr})
        return out
