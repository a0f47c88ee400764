# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The sampler: reads every registered thread's control frames from the
target with process_vm_readv, without Python's GIL.

One `Sampler` per target. `run()` is the tick loop (call it from a thread of
its own: it holds no GIL while sampling); `drain()` hands what was gathered
since the last drain to Python (new frames, new stacks, samples, thread
events, new ISeqs and method entries) under a short mutex. `read_memory()`
is the one remote read for Python code (symbols, snapshot).

The validation rules (docs in docs/internals.md, "Reading the stacks of a tick"):
- the slot's seqlock generation is the same before and after the read, so a
  thread that ended, or a slot reused by another thread, is never read as live;
- the thread's ec and frame pointer are re-read after the frames are copied;
  frames beyond the shallowest pointer seen are frames the thread left during
  the copy: left out. Every frame without ISeq+pc must have a C, IFUNC, dummy,
  top or eval magic; a Ruby frame a C function called must be marked FINISH;
  every frame that differs from this thread's previous sample is checked:
  a real ISeq (checked in the target at first sight), pc inside it;
- a sample failing a check is retried once, then counted as torn and dropped.
"""
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int64_t
from libc.stdlib cimport malloc, calloc, realloc, free
from libc.string cimport memcpy, memset, memcmp, strncpy
from posix.types cimport pid_t
from posix.fcntl cimport open as c_open, O_RDONLY, O_CLOEXEC
from posix.unistd cimport pread
from libc.stdio cimport snprintf
from posix.unistd cimport close as c_close
from posix.mman cimport mmap, munmap, PROT_READ, MAP_SHARED, MAP_FAILED
from posix.stat cimport struct_stat, fstat
from sdb_sidecar._encode cimport sdb_sample as SampleEnt, sdb_encode_samples, sdb_encode_samples_bound
from sdb_sidecar._readbatch cimport (sdb_batch, sdb_batch_init, sdb_batch_free, sdb_batch_add, sdb_batch_run,
                                     sdb_read_remote, SDB_BASE_ABS)
from sdb_sidecar._tstate cimport (sdb_tstate, sdb_kview, sdb_kernel_state, sdb_switch_ins, sdb_tstate_close,
                                  sdb_state_from_status, sdb_kv_holds, sdb_kv_settle,
                                  SDB_KV_ON_CPU as KV_ON_CPU, SDB_KV_UNKNOWN as KV_UNKNOWN)
from sdb_sidecar._intern cimport (sdb_intern, sdb_intern_init, sdb_intern_free, sdb_intern_clear, sdb_intern_find,
                                  sdb_intern_find_u64, sdb_intern_insert, sdb_intern_at)

cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_mutex_t:
        pass
    int pthread_mutex_init(pthread_mutex_t *m, void *attr)
    int pthread_mutex_lock(pthread_mutex_t *m)
    int pthread_mutex_unlock(pthread_mutex_t *m)
    int pthread_mutex_destroy(pthread_mutex_t *m)

cdef extern from "_sampler_util.h" nogil:
    uint64_t sdb_load_acquire_u64(const uint64_t *p)
    void sdb_store_release_u64(uint64_t *p, uint64_t v)
    int sdb_cas_u64(uint64_t *p, uint64_t expected, uint64_t desired)
    uint32_t sdb_load_relaxed_u32(const uint32_t *p)
    uint32_t sdb_load_acquire_u32(const uint32_t *p)
    void sdb_fence_acquire()
    int sdb_load_flag(const int *p)
    void sdb_store_flag(int *p, int v)
    uint64_t sdb_now_ns()
    uint64_t sdb_wall_ns()
    void sdb_sleep_until(uint64_t deadline_ns)
    void sdb_timer_slack(uint64_t ns)
    uint64_t sdb_mix64(uint64_t x)
    uint64_t sdb_xorshift(uint64_t *s)
    int sdb_errno()
    int ESRCH, EPERM, EFAULT, EFBIG
    void sdb_eventfd_signal(int fd)

cdef extern from "sdb_registry.h" nogil:
    int SDB_REGISTRY_VERSION
    int SDB_NAME_MAX
    int SDB_STATUS_ENABLED
    struct sdb_layout:
        uint16_t thread_ec
        uint16_t thread_status
        uint16_t thread_status_shift
        uint16_t thread_status_mask
        uint16_t ec_vm_stack
        uint16_t ec_vm_stack_size
        uint16_t ec_cfp
        uint16_t ec_thread_ptr
        uint16_t cfp_size
        uint16_t cfp_pc
        uint16_t cfp_iseq
        uint16_t cfp_self
        uint16_t cfp_ep
        uint16_t cfp_jit_return
        uint16_t iseq_body
        uint16_t body_type
        uint16_t body_iseq_size
        uint16_t body_iseq_encoded
        uint16_t body_pathobj
        uint16_t body_base_label
        uint16_t body_label
        uint16_t body_first_lineno
        uint16_t body_first_lineno_is_fixnum
        uint16_t body_insns_info_body
        uint16_t body_insns_info_positions
        uint16_t body_insns_info_size
        uint16_t body_insns_info_succ_table
        uint16_t body_parent_iseq
        uint16_t body_local_iseq
        uint16_t insn_info_entry_size
        uint16_t insn_info_line_no
        uint16_t rstring_noembed_bit
        uint16_t rstring_heap_len
        uint16_t rstring_heap_ptr
        uint16_t rstring_embed_len
        uint16_t rstring_embed_ary
        uint16_t rstring_embed_len_shift
        uint16_t rstring_embed_len_mask
        uint16_t rarray_embed_bit
        uint16_t rarray_embed_len_shift
        uint16_t rarray_embed_len_mask
        uint16_t rarray_embed_ary
        uint16_t rarray_heap_len
        uint16_t rarray_heap_ptr
        uint16_t me_defined_class
        uint16_t me_def
        uint16_t me_called_id
        uint16_t me_owner
        uint16_t def_original_id
        uint16_t class_ext
        uint16_t classext_classpath
        uint16_t fl_singleton_bit
        uint16_t tlast_op_id
        uint16_t qnil
        uint16_t class_ext_ptr
        uint16_t classext_iv_tbl
        uint16_t classext_attached_object
        uint16_t singleton_any_type
        uint16_t body_builtin_attrs
        uint16_t objspace_flags
        uint16_t gc_during_bit
        uint16_t gc_dont_gc_bit
        uint16_t cfp_sp
        uint16_t body_local_table_size
        uint16_t reserved16[2]
        uint64_t global_symbols_addr
        uint64_t id_classpath
        uint64_t id_tmp_classpath
        uint64_t id_attached
        uint64_t gc_flags_addr
        uint64_t running_ec_addr
        uint64_t reserved64[2]
    struct sdb_slot:
        uint64_t gen
        uint32_t live
        uint32_t native_tid
        uint64_t serial
        uint64_t thread_addr
        uint64_t ec_addr
        uint64_t start_mono_ns
        uint64_t start_wall_ns
        uint32_t state
        uint32_t flags
        char name[64]
        uint64_t span
        uint64_t span_ec
        uint64_t reserved[6]
    struct sdb_span_event:
        uint64_t seq
        uint64_t span
        uint64_t parent
        uint64_t thread_serial
        uint64_t at_ns
        uint32_t what
        uint32_t kind
        uint32_t endpoint
        uint32_t status
        char request_id[64]
        uint64_t reserved
    struct sdb_header:
        char magic[8]
        uint32_t version
        uint32_t header_size
        uint32_t slot_size
        uint32_t slot_count
        uint32_t slots_offset
        uint32_t pid
        uint32_t status
        uint32_t gc_active
        uint64_t proc_start_ticks
        uint64_t created_mono_ns
        uint64_t gen
        char ruby_version[32]
        char ruby_description[160]
        char layout_name[16]
        char disabled_reason[200]
        sdb_layout layout
        uint32_t spans_offset
        uint32_t span_count
        uint32_t strings_offset
        uint32_t strings_size
        uint64_t span_head
        uint32_t strings_used
        uint32_t strings_refused

# Frame kinds, as in the trace (docs/trace-format.md).
cdef enum:
    KIND_RUBY = 0
    KIND_CFUNC = 1
    KIND_OTHER = 2
    KIND_TRUNCATED = 3
    KIND_GC = 4             # "(garbage collection)": the thread was in GC, on top of its stack

# Frame magic (ep[0] & 0x7fff0001) the checks use, stable across Ruby 3.x (vm_core.h).
cdef enum:
    MAGIC_MASK = 0x7fff0001
    MAGIC_METHOD = 0x11110001
    MAGIC_TOP = 0x44440001
    MAGIC_CFUNC = 0x55550001
    MAGIC_IFUNC = 0x66660001
    MAGIC_EVAL = 0x77770001
    MAGIC_DUMMY = 0x79990001
    ENV_FLAG_LOCAL = 0x2
    FRAME_FLAG_FINISH = 0x20    # the frame returns to C: what a C function calls has it
    ISEQ_TYPE_METHOD = 1        # enum rb_iseq_type (vm_core.h, the same in 3.x)
    ISEQ_TYPE_BLOCK = 2
    LAYOUT_NA = 0xffff          # SDB_NA: a layout field the row does not have

# imemo types (internal/imemo.h, the same in 3.x): what ep[-2] (cref_or_me) may hold
cdef enum:
    IMEMO_CREF = 1
    IMEMO_SVAR = 2
    IMEMO_MENT = 6
    IMEMO_NONE = 0xff       # not an imemo (or unreadable)
    ME_WALK_MAX = 64        # env levels followed at most (Ruby nests blocks far less deep)

cdef enum:
    STATE_UNKNOWN = 0
    STATE_RUNNING = 1
    STATE_GVL_WAIT = 2
    STATE_BLOCKED = 3
    STATE_ENDED = 0xfe      # the sidecar's own (never in a sample): Ruby 3.1's th->status is KILLED (tstate.h)

cdef enum:
    AREA_RAW = 0
    AREA_EP = 1
    AREA_JOB_EC = 2
    AREA_JOB_HDR = 3
    AREA_JOB_CFP2 = 4
    AREA_JOB_TH = 5
    AREA_SPEC = 6
    AREA_WIN = 7            # phase 1's window of ep words (in eparena, like AREA_EP)
    AREA_GC_FLAGS = 8       # the VM's objspace->flags word (3.1: GC seen from outside)
    AREA_RUNNING_EC = 9     # the main ractor's running_ec (3.1: whose ec holds the GVL)

cdef enum:
    KSTATE_REFRESH_NS = 20000000
    MAX_READ = 16777216        # read_memory's limit: 16 MiB

cdef enum:                  # the read batch's buffers (native/readbatch.h: base 0 is an address)
    BASE_RAW = 1
    BASE_SPEC = 2
    BASE_EP = 3

cdef enum:
    EP_GAP = 2048           # ep spans closer than this are read as one (copying beats another iovec)
    EP_SPAN_MAX = 65536

cdef enum:
    EC_SPAN = 64            # bytes read from the ec: covers vm_stack, size, cfp
    SPEC_FRAMES = 8         # phase 1 also reads the control frames from this many above the last cfp
    WIN_MARGIN = 1024       # ... and the ep words the last read needed in its VM stack, this much wider
    WIN_MAX = 8192          #     on each side, at most this many bytes (the top of the stack)
    ISEQ_SPAN = 32          # bytes read from an ISeq: flags, wrapper, body
    BODY_SPAN = 32          # bytes read from an ISeq body: type, size, encoded
    BODY_SPAN_MAX = 512     # ... and up to local_table_size, where the layout has it
    ME_SPAN = 40            # bytes read from a method entry seen first: flags, defined_class, def, ...
    LINK_DEPTH = 32         # frames from the leaf whose link to their caller is checked (link_ok)

cdef uint64_t NO_EP = 0xffffffffffffffffULL
cdef uint32_t TYPE_UNREAD = 0xffffffffU
# Every address taken from the target is below this (x86-64 user space, 5-level paging included)
# before any arithmetic on it: far from 2**64, so `a + span` never wraps.
cdef uint64_t ADDR_MAX = 0x0100000000000000ULL

# Outcome of one attempt at reading a thread.
cdef enum:
    R_OK = 0
    R_TORN = 1      # a check failed: retry, then count as torn
    R_GONE = 2      # the thread left (or its slot changed) during the read
    R_ENDED = 3     # Ruby 3.1: th->status says the thread ended (KILLED); its slot is still live
    R_FATAL = 4     # the target is gone or unreadable: stop


cdef struct IseqEnt:
    uint64_t addr        # 0: empty bucket
    uint64_t encoded
    uint64_t size        # in VALUEs
    uint32_t locals      # local_table_size: a method frame's env sits at its caller's sp + locals + 3
    uint32_t type        # ISEQ_TYPE_*, when the row has local_table_size (else TYPE_UNREAD)
    uint64_t read_ns     # the copy window (job.lo_ns) of the sample whose check last read it

cdef struct FrameEnt:
    uint64_t iseq
    uint64_t pc
    uint64_t me
    uint32_t kind
    uint32_t pad

cdef struct StackEnt:
    uint64_t hash
    uint32_t off
    uint32_t length

cdef struct ThreadEvt:
    uint32_t ended       # 0: seen (new, or a new name), 1: left the registry
    uint32_t tid
    uint64_t serial
    uint64_t start_ns
    uint64_t at_ns
    uint32_t flags
    char name[64]

cdef struct AddrEvt:
    uint64_t addr
    uint64_t at_ns
    uint64_t encoded     # new ISeqs: iseq_encoded as seen (the remote read must find the same ISeq);
                         # new method entries: its definition (me->def) as seen
    uint64_t klass       # new method entries: its defined_class as seen (0: not read)

cdef struct RawFrame:       # one frame as read, before interning
    uint64_t iseq
    uint64_t pc
    uint64_t ep
    uint64_t ep_off         # where ep[-2..0] landed in the ep arena; NO_EP: not read
    uint64_t me             # Ruby frames: the callable method entry (rb_vm_frame_method_entry), 0: none
    uint64_t me_known       # 1: me taken from the thread's previous read (same ISeq and env there)

cdef struct MeMemo:         # a Ruby frame's method entry as found last time, root-aligned
    uint64_t ep
    uint64_t iseq
    uint64_t me

cdef struct TypeEnt:        # what a cref_or_me value is (first sight read, then cached)
    uint64_t addr           # 0: empty bucket
    uint64_t inner          # svar: its cref_or_me
    uint32_t type           # IMEMO_*
    uint32_t pad

cdef struct Job:            # one thread being read in this tick
    uint32_t slot
    int result              # R_*
    uint64_t serial
    uint64_t gen
    uint64_t ec_addr
    uint64_t thread_addr
    uint32_t state          # SDB_STATE_*: the gem's (Ruby >= 3.2), or worked out here (3.1)
    uint32_t from_status    # 1: state worked out here from th->status
    uint32_t kv_cand        # 3.1: the kernel view says not switched since a blocked read (checked below)
    uint32_t word           # the slot's whole state word (state | runs << 8) as copied
    uint32_t tid
    uint64_t ec
    uint64_t cfp
    uint64_t cfp2           # ec->cfp read again after the frames
    uint32_t nf
    uint32_t truncated
    uint32_t hdr_ok
    uint32_t cluster0
    uint32_t cluster1
    uint64_t raw_off        # its control frames in rawbuf
    uint64_t spec_lo        # phase 1's speculative read of its control frames: from this address,
    uint64_t spec_len       #   this many bytes, at spec_off in specbuf (spec_len 0: none)
    uint64_t spec_off
    uint32_t spec_ok        #   1: all of them were read
    uint64_t win_lo         # phase 1's window of ep words: [win_lo, win_hi) at win_off in eparena
    uint64_t win_hi
    uint64_t win_off
    uint32_t win_ok         #   1: read
    uint32_t cfp2_ok        # 1: cfp2 was read (in phase 1, after its frames and window; or in phase 3)
    uint64_t need_lo        # the ep words this read needed in its VM stack (the next read's window)
    uint64_t need_hi
    uint64_t frame0         # its first RawFrame in raw
    uint8_t hdr[64]         # EC_SPAN bytes of its ec
    uint8_t th[128]         # the span of rb_thread_t holding ec and status (when status is read)
    uint64_t switch_ins0    # 3.1: the thread's switch-in count before the read (0: not taken)
    int letter0             # 3.1: its kernel state letter, taken after switch_ins0, before the read
    uint64_t kv0            # 3.1 with the kernel view: its word before the read
    uint32_t kv_used        #   1: kv0 was taken (the view holds this thread)
    uint64_t read_ns        # when its control frames had been copied: the sample's time (read_jobs)
    uint64_t span0          # the slot's span and span_ec when the slot was taken (before any read)
    uint64_t span_ec
    uint64_t lo_ns          # before the first read of them: they were copied within [lo_ns, read_ns]

cdef struct Cluster:        # a span of ep words read with one iovec
    uint64_t lo
    uint64_t hi
    uint64_t arena_off
    uint32_t preread        # 1: phase 1's window (already read: never widened, never read again)

cdef struct Gathered:       # what the loop gathered since the last drain: handed over whole
    SampleEnt *samples
    uint64_t sample_cap, sample_len
    ThreadEvt *tevts
    uint64_t tevt_cap, tevt_len
    AddrEvt *new_iseqs
    uint64_t new_iseq_cap, new_iseq_len
    AddrEvt *new_mes
    uint64_t new_me_cap, new_me_len

cdef struct SlotCache:
    sdb_tstate ts           # what the kernel showed of its thread (3.1: native/tstate.c)
    uint32_t idle_word      # the slot's state word before the last read, when that read was of
    uint32_t idle_valid     #   an idle thread (blocked / waiting for the GVL): 1
    uint64_t kstate_ns      # when it was read
    uint64_t serial
    uint64_t ended_serial   # 3.1: the serial whose thread th->status showed ended (slot not yet freed)
    uint64_t gen
    uint64_t ec             # last ec seen: speculation only, always re-checked
    uint64_t cfp            # its cfp, VM stack and the stack's end as last read (speculation only)
    uint64_t vm_stack
    uint64_t stack_end
    uint64_t win_lo         # the ep words the last read needed in the VM stack (0, 0: none yet)
    uint64_t win_hi
    uint32_t nprev          # frames in prev (root first)
    uint32_t cap
    FrameEnt *prev          # previous sample's frames, root first
    uint32_t *prev_ids
    uint32_t prev_stack
    uint32_t has_prev
    MeMemo *memo            # method entries of the last read's frames, root first
    uint32_t nmemo
    uint32_t memo_cap


cdef struct StackKey:        # a stack being interned: its frame ids, leaf first
    const uint32_t *ids
    uint32_t n
    uint64_t hash

cdef int frame_eq(const void *entry, const void *key, const void *ctx) noexcept nogil:
    cdef const FrameEnt *g = <const FrameEnt *>entry
    cdef const FrameEnt *f = <const FrameEnt *>key
    return g.iseq == f.iseq and g.pc == f.pc and g.me == f.me and g.kind == f.kind

cdef int stack_eq(const void *entry, const void *key, const void *ctx) noexcept nogil:
    """ctx: the arena holding the frame ids of the stacks"""
    cdef const StackEnt *s = <const StackEnt *>entry
    cdef const StackKey *k = <const StackKey *>key
    return s.hash == k.hash and s.length == k.n and (
        k.n == 0 or memcmp(&(<const uint32_t *>ctx)[s.off], k.ids, k.n * sizeof(uint32_t)) == 0)


cdef inline uint64_t u64_at(const uint8_t *p, uint32_t off) noexcept nogil:
    return (<const uint64_t *>(p + off))[0]

cdef inline uint32_t u32_at(const uint8_t *p, uint32_t off) noexcept nogil:
    return (<const uint32_t *>(p + off))[0]

cdef inline int grow(void **arr, uint64_t *cap, uint64_t need, size_t elem) noexcept nogil:
    cdef uint64_t c = cap[0]
    cdef void *p
    if need <= c:
        return 0
    if c == 0:
        c = 256
    while c < need:
        c *= 2
    p = realloc(arr[0], c * elem)
    if p == NULL:
        return -1
    arr[0] = p
    cap[0] = c
    return 0


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
    return None


cdef class Registry:
    """The gem's registry, mapped read-only."""
    cdef const uint8_t *base
    cdef size_t size
    cdef const sdb_header *hdr
    cdef readonly str path
    # the header's geometry, read once: the file is shared with the target, which could change
    # these words at any time; only the copies checked by check() are ever used
    cdef uint32_t slot_count, slot_size, slots_offset
    cdef uint32_t spans_offset, strings_offset, strings_size
    cdef readonly uint32_t span_count   # span ring entries (the header's, read once)
    cdef int checked

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
            c.request_id[63] = 0
            out.append((c.what, c.span, c.parent, c.thread_serial, c.at_ns, c.kind, c.endpoint, c.status,
                        <bytes>c.request_id))
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
    def strings_refused(self):
        return self.hdr.strings_refused

    def threads(self):
        """The live slots right now: a list of dicts (seqlock-checked copies)."""
        out = []
        cdef const sdb_slot *s
        cdef sdb_slot copy
        cdef uint64_t g1
        cdef uint32_t i
        cdef int tries
        if not self.checked:
            self.check()
        for i in range(self.slot_count):
            s = <const sdb_slot *>(self.base + self.slots_offset + <size_t>i * self.slot_size)
            for tries in range(100):
                g1 = sdb_load_acquire_u64(&s.gen)
                if g1 & 1:
                    continue
                memcpy(&copy, <const void *>s, sizeof(sdb_slot))
                sdb_fence_acquire()
                if sdb_load_acquire_u64(&s.gen) == g1:
                    break
            else:
                continue
            if copy.live:
                out.append({"slot": i, "serial": copy.serial, "tid": copy.native_tid,
                            "name": copy.name[:SDB_NAME_MAX].split(b"\0", 1)[0].decode(errors="replace"),
                            "start_ns": copy.start_mono_ns, "flags": copy.flags, "state": copy.state,
                            "thread_addr": copy.thread_addr, "ec_addr": copy.ec_addr})
        return out


cdef class Sampler:
    cdef Registry reg
    cdef pid_t pid
    cdef char task_dir[256]             # where the target's threads are in procfs, by the registry's tids
    cdef sdb_layout L
    cdef uint32_t max_depth
    cdef uint64_t period_ns
    cdef uint64_t jitter_ns
    cdef uint64_t rng
    cdef pthread_mutex_t mu
    cdef int stop_flag
    cdef int wake_fd                     # eventfd of the drain loop (-1: none): see set_wake_fd
    cdef int wake_sent                   # signalled since the last drain
    cdef readonly int fatal_errno      # errno that stopped the loop (ESRCH: target exited)
    # tables (native/intern.c, one kind of table five times)
    cdef sdb_intern iseqs               # IseqEnt by address: ISeqs checked in the target
    cdef sdb_intern frames              # FrameEnt: a frame's id is its position
    cdef uint64_t frames_drained
    cdef sdb_intern stacks              # StackEnt (frame ids in arena): a stack's id is its position
    cdef uint64_t stacks_drained
    cdef uint32_t *arena
    cdef uint64_t arena_cap, arena_len
    cdef sdb_intern mes                 # method entries seen (uint64_t addresses)
    cdef sdb_intern types               # TypeEnt: cref_or_me value -> imemo type (first sight: one read)
    cdef readonly uint64_t gc_samples   # samples taken while their thread was in GC
    cdef uint32_t gc_flags_word          # 3.1: objspace->flags and running_ec as read with the
    cdef uint64_t running_ec_word        #   stacks of this read_jobs call (gem: sdb_find_gc_words)
    cdef uint32_t gc_words_read          #   how many of the two reads succeeded
    cdef Gathered g                      # outputs since the last drain
    cdef sdb_kview kv                    # 3.1: the kernel view (kview.py), words NULL without it
    # per slot
    cdef SlotCache *cache
    cdef uint32_t nslots
    cdef uint32_t hwm                    # slots [0, hwm) have been used at least once
    cdef uint32_t th_lo, th_len          # span of rb_thread_t read for ec + status (0: not read)
    cdef uint64_t tick_ns                # time of the tick being taken
    # scratch, grown as needed
    cdef Job *jobs
    cdef uint64_t job_cap
    cdef sdb_batch batch                 # the reads queued for the next process_vm_readv (native/readbatch.c)
    cdef uint8_t *rawbuf
    cdef uint64_t rawbuf_cap
    cdef uint8_t *specbuf
    cdef uint64_t specbuf_cap
    cdef readonly uint64_t spec_hits     # threads whose frames phase 1 read speculatively (no phase 2)
    cdef readonly uint64_t yjit_pcs      # YJIT frames sampled without a line (their pc not kept)
    cdef readonly uint64_t span_unsure   # samples of a thread in a span left without it: the span
                                         # changed during the read, or the stack was another fiber's
    cdef readonly uint64_t phase3_skips  # reads that phase 1 completed (frames, ep words, cfp again)
    cdef RawFrame *raw
    cdef uint64_t raw_cap
    cdef uint8_t *eparena
    cdef uint64_t ep_cap
    cdef Cluster *clusters
    cdef uint64_t cluster_cap
    cdef uint32_t *ids
    cdef FrameEnt *cur
    # counters (read by stats())
    cdef readonly uint64_t reused                   # samples whose stack needed no read (idle since)
    cdef readonly uint64_t ticks, late, missed, total_samples, torn, retried, errors, threads_seen
    cdef readonly uint64_t start_ns, last_tick_ns
    cdef readonly uint64_t read_ns_total   # time spent reading stacks (for the benchmark)

    def __cinit__(self, Registry reg, int pid, double rate_hz=1000.0, int max_depth=2048):
        cdef uint32_t i
        reg.check()                     # raises RegistryError: sizes checked once
        self.reg = reg
        self.pid = pid
        snprintf(self.task_dir, sizeof(self.task_dir), "/proc/%d/task", <int>pid)
        self.L = reg.hdr.layout         # the sampler's own copy, checked here
        why = layout_problem(&self.L)
        if why is not None:
            raise RegistryError(f"{reg.path}: the layout is not one this sidecar can read ({why})")
        self.max_depth = max_depth
        self.period_ns = <uint64_t>(1e9 / rate_hz)
        self.jitter_ns = self.period_ns // 20      # +-5% of a period
        self.rng = sdb_mix64(<uint64_t>pid ^ sdb_now_ns()) | 1
        self.wake_fd = -1
        pthread_mutex_init(&self.mu, NULL)
        self.nslots = reg.slot_count
        self.th_lo = 0
        self.th_len = 0
        if self.L.thread_status != 0xffff and self.L.thread_status_mask != 0xffff and self.L.thread_status_shift < 8:
            self.th_lo = min(self.L.thread_ec, self.L.thread_status)
            self.th_len = max(self.L.thread_ec + 8, self.L.thread_status + 1) - self.th_lo
            if self.th_len > 128:
                self.th_len = 0
        self.cache = <SlotCache *>calloc(self.nslots + 1, sizeof(SlotCache))
        self.ids = <uint32_t *>malloc((max_depth + 2) * sizeof(uint32_t))
        self.cur = <FrameEnt *>malloc((max_depth + 2) * sizeof(FrameEnt))
        if (sdb_intern_init(&self.iseqs, sizeof(IseqEnt), 4096) != 0
                or sdb_intern_init(&self.frames, sizeof(FrameEnt), 4096) != 0
                or sdb_intern_init(&self.stacks, sizeof(StackEnt), 4096) != 0
                or sdb_intern_init(&self.mes, sizeof(uint64_t), 1024) != 0
                or sdb_intern_init(&self.types, sizeof(TypeEnt), 1024) != 0
                or self.cache == NULL or self.ids == NULL
                or sdb_batch_init(&self.batch) != 0
                or self.cur == NULL):
            raise MemoryError()
        # the empty stack is stack 0
        self.intern_stack(NULL, 0)

    def __dealloc__(self):
        cdef uint32_t i
        if self.cache != NULL:
            for i in range(self.nslots + 1):
                sdb_tstate_close(&self.cache[i].ts)
                free(self.cache[i].prev)
                free(self.cache[i].prev_ids)
                free(self.cache[i].memo)
        free(self.cache)
        free(self.rawbuf)
        free(self.specbuf)
        free(self.raw)
        free(self.jobs)
        sdb_batch_free(&self.batch)
        free(self.eparena)
        free(self.clusters)
        free(self.ids)
        free(self.cur)
        sdb_intern_free(&self.iseqs)
        sdb_intern_free(&self.frames)
        sdb_intern_free(&self.stacks)
        free(self.arena)
        sdb_intern_free(&self.mes)
        sdb_intern_free(&self.types)
        free(self.g.samples)
        free(self.g.tevts)
        free(self.g.new_iseqs)
        free(self.g.new_mes)
        pthread_mutex_destroy(&self.mu)

    # ------------------------------------------------------------ remote reads
    cdef inline ssize_t read1(self, uint64_t addr, void *dst, size_t n) noexcept nogil:
        return sdb_read_remote(self.pid, addr, dst, n)

    def use_task_dir(self, str path):
        """The procfs directory whose entries are the target's threads by the tids its registry holds:
        /proc/PID/task in our pid namespace; for a target in another one (a container), the task
        directory of its own procfs (through /proc/PID/root). "": none (thread states from procfs
        are then unknown). Called before the sampler runs."""
        b = path.encode()
        cdef const char *src = b
        cdef size_t n = len(b)
        if n >= sizeof(self.task_dir):
            raise ValueError(f"task directory path too long: {path!r}")
        with nogil:
            pthread_mutex_lock(&self.mu)
            memcpy(self.task_dir, src, n)
            self.task_dir[n] = 0
            pthread_mutex_unlock(&self.mu)

    cdef void start_over(self) noexcept nogil:
        """drain(reset=True), under the mutex: the tables empty (their memory kept for reuse)."""
        cdef uint32_t i
        sdb_intern_clear(&self.frames)
        self.frames_drained = 0
        sdb_intern_clear(&self.stacks)
        self.stacks_drained = 0
        self.arena_len = 0
        sdb_intern_clear(&self.iseqs)
        sdb_intern_clear(&self.mes)
        for i in range(self.nslots + 1):
            self.cache[i].has_prev = 0

    def forget_iseqs(self):
        """Every ISeq is new again: the next sample that shows one hands it to the Drainer, which
        names it anew. Called when the eBPF creation probes stop or come back (a pause): an ISeq
        born unseen at a known address, with the same instruction buffer as the one before it,
        would otherwise pass for that one. Every thread's next sample is read whole and checked
        (no frame taken from its previous sample, no idle reuse), so each ISeq on it is named anew."""
        cdef uint32_t i
        with nogil:
            pthread_mutex_lock(&self.mu)
            sdb_intern_clear(&self.iseqs)
            for i in range(self.nslots + 1):
                self.cache[i].has_prev = 0
            pthread_mutex_unlock(&self.mu)

    def use_kernel_view(self, size_t address, uint32_t slots):
        """Ruby 3.1: read each thread's switch-in count and on-CPU bit from the kernel view mapped at
        `address` (kview.KernelView: `slots` 64-bit words, a power of two) instead of procfs. The view
        must stay mapped while this sampler runs. 0: back to procfs."""
        cdef uint32_t i
        if slots & (slots - 1):
            raise ValueError("the kernel view's slot count must be a power of two")
        pthread_mutex_lock(&self.mu)
        self.kv.words = <uint64_t *>address
        self.kv.mask = slots - 1 if address else 0
        for i in range(self.nslots + 1):
            self.cache[i].ts.kv_tid = 0
            self.cache[i].ts.kv_failed = 0
            self.cache[i].ts.kv_probe_ns = 0
            self.cache[i].ts.asleep = 0
        pthread_mutex_unlock(&self.mu)

    @property
    def uses_thread_status(self):
        """True on Ruby 3.1 (no GVL hooks): thread states and idle reuse come from the VM's thread
        status and the kernel (procfs, or the kernel view)."""
        return self.th_len != 0

    def read_memory(self, uint64_t addr, size_t n):
        """Read n bytes at addr in the target; raises OSError (errno set) on failure or a short read."""
        cdef bytearray buf
        cdef char *p
        cdef ssize_t got
        if n == 0:
            return b""
        if n > MAX_READ:
            # sizes come from the target's memory, which may have changed under us: never allocate blindly
            raise OSError(EFBIG, f"refusing to read {n} bytes at 0x{addr:x} (more than {MAX_READ})")
        buf = bytearray(n)
        p = buf
        with nogil:
            got = self.read1(addr, p, n)
        if got < 0:
            raise OSError(sdb_errno(), f"cannot read {n} bytes at 0x{addr:x} in process {self.pid}")
        if <size_t>got != n:
            raise OSError(EFAULT, f"short read at 0x{addr:x} in process {self.pid} ({got} of {n} bytes)")
        return bytes(buf)

    # ------------------------------------------------------------ interning
    cdef inline IseqEnt *iseq_lookup(self, uint64_t addr) noexcept nogil:
        """The ISeq checked at addr, NULL: none."""
        return <IseqEnt *>sdb_intern_find_u64(&self.iseqs, sdb_mix64(addr), addr)

    cdef int check_iseq(self, uint64_t iseq, uint64_t pc, uint64_t now, int jit=0) noexcept nogil:
        """1 if iseq is a real ISeq of the target with pc inside it; with `jit` (a frame YJIT pushed,
        whose pc YJIT may not have written), 2 if it is a real ISeq, read now, and pc is not inside
        it; else 0.
        Known ISeqs are checked from the cache; an unknown one (or a pc outside the
        cached range: the address may have been reused) is read from the target."""
        cdef IseqEnt *e
        cdef uint8_t ib[ISEQ_SPAN]
        cdef uint8_t bb[BODY_SPAN_MAX]
        cdef uint64_t flags, body, encoded, size
        cdef uint32_t span = BODY_SPAN
        cdef IseqEnt fresh
        cdef int64_t id
        e = self.iseq_lookup(iseq)
        cdef int known = e != NULL
        if known and pc >= e.encoded and pc <= e.encoded + e.size * 8:
            return 1
        if known and jit and e.read_ns == now:
            return 2        # read for this sample already (link_ok, then finish_job): the pc not its own
        if self.L.body_local_table_size != LAYOUT_NA and self.L.body_local_table_size != 0 \
                and self.L.body_local_table_size + 4 <= BODY_SPAN_MAX \
                and self.L.body_local_table_size + 4 > span:
            span = self.L.body_local_table_size + 4
        if self.read1(iseq, ib, ISEQ_SPAN) != ISEQ_SPAN:
            return 0
        flags = u64_at(ib, 0)
        body = u64_at(ib, self.L.iseq_body)
        if (flags & 0x1f) != 0x1a or ((flags >> 12) & 0xf) != 7 or body == 0:
            return 0
        if self.read1(body, bb, span) != span:
            return 0
        size = u32_at(bb, self.L.body_iseq_size)
        encoded = u64_at(bb, self.L.body_iseq_encoded)
        if encoded == 0 or size == 0:
            return 0
        if pc < encoded or pc > encoded + size * 8:
            if not jit:
                return 0
            if known and e.encoded == encoded and e.size == size:
                e.read_ns = now
                return 2                    # the ISeq it was, its pc not kept
        if not known:
            id = sdb_intern_insert(&self.iseqs, sdb_mix64(iseq), &fresh)
            if id < 0:
                return 0
            e = <IseqEnt *>sdb_intern_at(&self.iseqs, <uint64_t>id)
        e.addr = iseq
        e.encoded = encoded
        e.size = size
        e.type = TYPE_UNREAD
        e.locals = 0
        e.read_ns = now
        if span > BODY_SPAN:
            e.type = u32_at(bb, self.L.body_type)
            e.locals = u32_at(bb, self.L.body_local_table_size)
        # a new ISeq, or a reused address: handed to the Drainer, which names it from eBPF's birth
        # record when eBPF saw its birth (attached from that birth to this sample: nothing born there
        # unseen in between) and reads it otherwise. (A map of eBPF's names, trusted here when it held
        # these instructions, named a method born unseen at a reused address with a reused buffer by
        # its predecessor's name: the probes stop themselves before the map can be cleared.)
        if grow(<void **>&self.g.new_iseqs, &self.g.new_iseq_cap, self.g.new_iseq_len + 1, sizeof(AddrEvt)) == 0:
            self.g.new_iseqs[self.g.new_iseq_len].addr = iseq
            self.g.new_iseqs[self.g.new_iseq_len].at_ns = now
            self.g.new_iseqs[self.g.new_iseq_len].encoded = encoded
            self.g.new_iseq_len += 1
        return 1 if pc >= encoded and pc <= encoded + size * 8 else 2

    cdef void note_me(self, uint64_t me, uint64_t now) noexcept nogil:
        cdef uint8_t mb[ME_SPAN]
        if me == 0 or sdb_intern_find_u64(&self.mes, sdb_mix64(me), me) != NULL:
            return
        if sdb_intern_insert(&self.mes, sdb_mix64(me), &me) < 0:
            return
        if grow(<void **>&self.g.new_mes, &self.g.new_me_cap, self.g.new_me_len + 1, sizeof(AddrEvt)) == 0:
            self.g.new_mes[self.g.new_me_len].addr = me
            self.g.new_mes[self.g.new_me_len].at_ns = now
            # what the entry is now: the Drainer's later read must find the same definition and class
            # (GC.compact moves method entries, and a freed one's memory is reused)
            self.g.new_mes[self.g.new_me_len].encoded = 0
            self.g.new_mes[self.g.new_me_len].klass = 0
            if self.read1(me, mb, ME_SPAN) == ME_SPAN:
                self.g.new_mes[self.g.new_me_len].encoded = u64_at(mb, self.L.me_def)
                self.g.new_mes[self.g.new_me_len].klass = u64_at(mb, self.L.me_defined_class)
            self.g.new_me_len += 1

    cdef int64_t intern_frame(self, const FrameEnt *f) noexcept nogil:
        """The id of frame f (a new one the first time it is seen); -1: no memory."""
        cdef uint64_t h = sdb_mix64(f.iseq * 31 + f.pc * 17 + f.me * 7 + f.kind + 1)
        cdef int64_t id = sdb_intern_find(&self.frames, h, frame_eq, f, NULL)
        if id >= 0:
            return id
        return sdb_intern_insert(&self.frames, h, f)

    cdef int64_t intern_stack(self, const uint32_t *ids, uint32_t n) noexcept nogil:
        """The id of the stack of frames ids[0:n], leaf first (a new one the first time); -1: no memory."""
        cdef uint64_t h = 0x9e3779b97f4a7c15ULL ^ n
        cdef uint32_t k
        cdef int64_t sid
        cdef StackKey key
        cdef StackEnt ent
        for k in range(n):
            h = sdb_mix64(h ^ ids[k])
        key.ids = ids
        key.n = n
        key.hash = h
        sid = sdb_intern_find(&self.stacks, h, stack_eq, &key, self.arena)
        if sid >= 0:
            return sid
        if grow(<void **>&self.arena, &self.arena_cap, self.arena_len + n + 1, sizeof(uint32_t)) != 0:
            return -1
        ent.hash = h
        ent.off = <uint32_t>self.arena_len
        ent.length = n
        sid = sdb_intern_insert(&self.stacks, h, &ent)
        if sid < 0:
            return -1
        if n:
            memcpy(&self.arena[self.arena_len], ids, n * sizeof(uint32_t))
        self.arena_len += n
        return sid

    # ------------------------------------------------------------ reading, batched
    # A tick reads every thread in the same few process_vm_readv calls: on this
    # kind of machine a call costs ~2 us and each remote iovec ~0.35 us, so the
    # calls are shared between threads and the iovecs kept few (see
    # benchmarks/RESULTS.md). Phases, each one call for all threads:
    #   1. th->ec of each thread, and speculatively the header of the ec seen last
    #      time (vm_stack, vm_stack_size, cfp); 1b. the header of any ec that changed
    #   2. each thread's control frames, cfp .. end of its VM stack (one iovec each)
    #   3. ep[-2..0] of the frames that have no ISeq+pc (C functions, IFUNCs),
    #      merged into contiguous spans, then ec->cfp again (after the frames)
    #   4. (no reads) checks, interning, one sample per thread.
    cdef inline void add_req(self, uint64_t addr, uint64_t length, uint32_t area, uint64_t off,
                             uint32_t job, uint32_t fail) noexcept nogil:
        """Queue a read for job: its bytes go to `area` (AREA_*) at off; when it fails, the job's
        result becomes `fail` (R_OK: a speculative read, nothing)."""
        cdef Job *jb = &self.jobs[job]
        cdef uint32_t base = SDB_BASE_ABS
        cdef uint32_t *done = NULL
        if area == AREA_RAW:
            base = BASE_RAW
        elif area == AREA_SPEC:
            base = BASE_SPEC
            done = &jb.spec_ok
        elif area == AREA_EP or area == AREA_WIN:
            base = BASE_EP
            if area == AREA_WIN:
                done = &jb.win_ok
        elif area == AREA_JOB_EC:
            off = <uint64_t>&jb.ec
        elif area == AREA_JOB_HDR:
            off = <uint64_t>jb.hdr
            done = &jb.hdr_ok
        elif area == AREA_JOB_TH:
            off = <uint64_t>jb.th
        elif area == AREA_GC_FLAGS:
            off = <uint64_t>&self.gc_flags_word
            done = &self.gc_words_read
        elif area == AREA_RUNNING_EC:
            off = <uint64_t>&self.running_ec_word
            done = &self.gc_words_read
        else:
            off = <uint64_t>&jb.cfp2
            done = &jb.cfp2_ok
        if sdb_batch_add(&self.batch, addr, length, base, off, &jb.result, <int>fail, done) != 0:
            jb.result = R_TORN

    cdef int run_reqs(self) noexcept nogil:
        """Issue the queued reads (native/readbatch.c). -1: the target is gone (fatal_errno says why)."""
        cdef int e
        self.batch.bases[BASE_RAW] = self.rawbuf
        self.batch.bases[BASE_SPEC] = self.specbuf
        self.batch.bases[BASE_EP] = self.eparena
        e = sdb_batch_run(&self.batch, self.pid)
        if e != 0:
            self.fatal_errno = e
            return -1
        return 0

    cdef int read_jobs(self, uint32_t first, uint32_t n) noexcept nogil:
        """Phases 1-3 for jobs[first:first+n]. -1: the target is gone."""
        cdef uint32_t j, f, nclusters = 0, runnable = 0
        cdef int k
        cdef Job *job
        cdef SlotCache *c
        cdef uint64_t vm_stack, vm_size, end, raw_total = 0, frames_total = 0, ep_total = 0, spec_total = 0
        cdef uint64_t need, win_total = 0
        cdef uint32_t fresh = 0
        cdef uint64_t ep, lo, hi, nframes, read_ns
        cdef MeMemo *memo
        cdef RawFrame *r
        cdef uint8_t *base
        cdef Cluster *cl
        cdef uint64_t lo_ns = sdb_now_ns()
        # 1. th->ec, and the header of the ec seen last time, and after it (so read later, as
        #    phase 2 would) that ec's control frames from a few frames above its last cfp;
        #    on 3.1, first, the VM's GC flags and running ec (who is collecting, see finish_job)
        self.gc_words_read = 0
        self.gc_flags_word = 0
        self.running_ec_word = 0
        if self.L.gc_flags_addr != 0 and self.L.running_ec_addr != 0 and n > 0:
            self.add_req(self.L.gc_flags_addr, 4, AREA_GC_FLAGS, 0, first, R_OK)
            self.add_req(self.L.running_ec_addr, 8, AREA_RUNNING_EC, 0, first, R_OK)
        for j in range(first, first + n):
            job = &self.jobs[j]
            job.lo_ns = lo_ns
            job.hdr_ok = 0
            job.spec_ok = 0
            job.spec_len = 0
            job.win_ok = 0
            job.win_hi = 0
            job.win_lo = 0
            job.cfp2_ok = 0
            job.need_lo = 0
            job.need_hi = 0
            job.from_status = 0
            c = &self.cache[job.slot]
            if job.state == STATE_UNKNOWN and self.th_len:
                # no state from the gem (Ruby 3.1): th->ec and th->status in one read
                self.add_req(job.thread_addr + self.th_lo, self.th_len, AREA_JOB_TH, 0, j, R_GONE)
            else:
                self.add_req(job.ec_addr, 8, AREA_JOB_EC, 0, j, R_GONE)
            if c.ec != 0:
                self.add_req(c.ec, EC_SPAN, AREA_JOB_HDR, 0, j, R_OK)
                if c.stack_end != 0:
                    lo = c.cfp - SPEC_FRAMES * <uint64_t>self.L.cfp_size
                    if c.cfp < c.vm_stack + SPEC_FRAMES * <uint64_t>self.L.cfp_size:
                        lo = c.cfp
                    need = (SPEC_FRAMES + 1 + <uint64_t>self.max_depth) * self.L.cfp_size
                    job.spec_lo = lo
                    job.spec_len = c.stack_end - lo if c.stack_end - lo < need else need
                    job.spec_off = spec_total
                    spec_total += job.spec_len
                    self.add_req(lo, job.spec_len, AREA_SPEC, job.spec_off, j, R_OK)
                    # the ep words around those the last read needed, then ec->cfp again: when
                    # every frame's ep words are in the window, this call was the tick's last
                    if c.win_hi > c.win_lo:
                        job.win_lo = c.win_lo - WIN_MARGIN if c.win_lo - WIN_MARGIN > c.vm_stack else c.vm_stack
                        job.win_hi = c.win_hi + WIN_MARGIN if c.win_hi + WIN_MARGIN < c.cfp else c.cfp
                        if job.win_hi > job.win_lo:
                            job.win_off = win_total
                            win_total += job.win_hi - job.win_lo
                            self.add_req(job.win_lo, job.win_hi - job.win_lo, AREA_WIN, job.win_off, j, R_OK)
                    self.add_req(c.ec + self.L.ec_cfp, 8, AREA_JOB_CFP2, 0, j, R_OK)
        if (grow(<void **>&self.specbuf, &self.specbuf_cap, spec_total + 64, 1) != 0
                or grow(<void **>&self.eparena, &self.ep_cap, win_total + 8, 1) != 0):
            return -1
        ep_total = win_total
        if self.run_reqs() != 0:
            return -1
        # 1b. the header of an ec that changed (a fiber switch, a new thread)
        for j in range(first, first + n):
            job = &self.jobs[j]
            if job.result != R_OK:
                continue
            if job.state == STATE_UNKNOWN and self.th_len:
                job.ec = u64_at(job.th, self.L.thread_ec - self.th_lo)
                job.state = self.state_from_status(job)
                job.from_status = 1
                if job.state == STATE_ENDED:
                    # Ruby 3.1 sends no event when a thread ends by an exception or a kill, so the
                    # gem frees its slot only at the next registration: the VM's status says it now
                    job.result = R_ENDED
                    continue
                if job.state == STATE_RUNNING:
                    runnable += 1
            if job.ec == 0:
                job.result = R_GONE
            elif job.ec != self.cache[job.slot].ec or not job.hdr_ok:
                job.spec_ok = 0             # what phase 1 read was another ec's (or its header failed)
                job.win_ok = 0
                self.add_req(job.ec, EC_SPAN, AREA_JOB_HDR, 0, j, R_GONE)
        if self.batch.n and self.run_reqs() != 0:
            return -1
        if runnable > 1:
            # several runnable threads (Ruby 3.1): the kernel tells who runs and who waits for the GVL.
            # A lone runnable thread holds the GVL, or is about to take it: running.
            for j in range(first, first + n):
                job = &self.jobs[j]
                if job.result == R_OK and job.from_status and job.state == STATE_RUNNING:
                    c = &self.cache[job.slot]
                    if job.kv_used and (job.kv0 & KV_UNKNOWN) == 0:
                        # the kernel view: on a CPU, it runs; off, it waits (for the GVL, or the CPU)
                        job.state = STATE_RUNNING if job.kv0 & KV_ON_CPU else STATE_GVL_WAIT
                        continue
                    if self.tick_ns - c.ts.kstate_ns >= KSTATE_REFRESH_NS or c.ts.kstate == 0:
                        # a thread's kernel state changes at GVL hand-offs (a 100 ms time slice
                        # under contention): re-read it at most every 20 ms
                        c.ts.kstate = sdb_kernel_state(&c.ts, self.task_dir, job.tid)
                        c.ts.kstate_ns = self.tick_ns
                    k = c.ts.kstate
                    job.state = STATE_UNKNOWN if k == 0 else (STATE_RUNNING if k == 82 else STATE_GVL_WAIT)  # 'R'
        for j in range(first, first + n):
            job = &self.jobs[j]
            if job.result != R_OK:
                continue
            self.cache[job.slot].ec = job.ec
            vm_stack = u64_at(job.hdr, self.L.ec_vm_stack)
            vm_size = u64_at(job.hdr, self.L.ec_vm_stack_size)
            job.cfp = u64_at(job.hdr, self.L.ec_cfp)
            end = vm_stack + vm_size * 8
            if vm_stack == 0 or job.cfp == 0:
                job.result = R_GONE         # a thread being set up or torn down: no stack
                continue
            if vm_stack >= ADDR_MAX or vm_size >= ADDR_MAX // 8 or (job.cfp & 7):
                job.result = R_TORN         # garbage: no arithmetic on it
                continue
            if job.cfp < vm_stack or job.cfp >= end or (end - job.cfp) % self.L.cfp_size != 0:
                job.result = R_TORN
                continue
            nframes = (end - job.cfp) / self.L.cfp_size      # 64-bit: capped before it is narrowed
            nframes = nframes - 1 if nframes > 0 else 0    # the outermost frame is Ruby's dummy: not shown
            job.truncated = 0
            if nframes > self.max_depth:
                nframes = self.max_depth
                job.truncated = 1
            job.nf = <uint32_t>nframes
            job.raw_off = raw_total
            job.frame0 = frames_total
            raw_total += job.nf * <uint64_t>self.L.cfp_size
            frames_total += job.nf
            c = &self.cache[job.slot]
            c.cfp = job.cfp
            c.vm_stack = vm_stack
            c.stack_end = end
            # the speculative read holds all of this read's frames: no phase 2 for it
            if job.spec_ok and (job.cfp < job.spec_lo
                                or job.cfp + job.nf * <uint64_t>self.L.cfp_size > job.spec_lo + job.spec_len):
                job.spec_ok = 0
            if not job.spec_ok:
                job.cfp2_ok = 0             # read before its frames: phase 3 reads it again
        if (grow(<void **>&self.rawbuf, &self.rawbuf_cap, raw_total + 64, 1) != 0
                or grow(<void **>&self.raw, &self.raw_cap, frames_total + 1, sizeof(RawFrame)) != 0):
            return -1
        # 2. the control frames (but those phase 1 already read)
        for j in range(first, first + n):
            job = &self.jobs[j]
            if job.result == R_OK and job.nf > 0:
                if job.spec_ok:
                    memcpy(self.rawbuf + job.raw_off, self.specbuf + job.spec_off + (job.cfp - job.spec_lo),
                           job.nf * <uint64_t>self.L.cfp_size)
                    self.spec_hits += 1
                else:
                    self.add_req(job.cfp, job.nf * <uint64_t>self.L.cfp_size, AREA_RAW, job.raw_off, j, R_TORN)
        if self.batch.n and self.run_reqs() != 0:
            return -1
        # the sample's time, taken once its frames were copied: never earlier than what they show (an
        # ISeq born just before the read, named by eBPF from its birth, must not be looked up at a time
        # before it). The tick's start is several us earlier (a retry's: a whole read earlier).
        read_ns = sdb_now_ns()
        for j in range(first, first + n):
            self.jobs[j].read_ns = read_ns
        # 3. ep words of the frames without ISeq+pc, in merged spans; then ec->cfp again
        for j in range(first, first + n):
            job = &self.jobs[j]
            if job.result != R_OK:
                continue
            base = self.rawbuf + job.raw_off
            job.cluster0 = nclusters
            cl = NULL
            c = &self.cache[job.slot]
            memo = c.memo if not job.truncated else NULL
            if job.win_ok:
                # phase 1's window: the job's first span, already read
                if grow(<void **>&self.clusters, &self.cluster_cap, nclusters + 1, sizeof(Cluster)) != 0:
                    return -1
                cl = &self.clusters[nclusters]
                nclusters += 1
                cl.lo = job.win_lo
                cl.hi = job.win_hi
                cl.arena_off = job.win_off
                cl.preread = 1
            for f in range(job.nf):
                r = &self.raw[job.frame0 + f]
                r.iseq = u64_at(base, f * self.L.cfp_size + self.L.cfp_iseq)
                r.pc = u64_at(base, f * self.L.cfp_size + self.L.cfp_pc)
                r.ep = u64_at(base, f * self.L.cfp_size + self.L.cfp_ep)
                r.ep_off = NO_EP
                r.me = 0
                r.me_known = 0
                if r.ep < 16:
                    continue
                if r.ep >= ADDR_MAX or (r.ep & 7):
                    job.result = R_TORN     # no Ruby env is there: a torn frame (the span arithmetic
                    break                   # below must never see such a value)
                if r.iseq != 0 and r.pc != 0 and memo != NULL and job.nf - 1 - f < c.nmemo \
                        and memo[job.nf - 1 - f].ep == r.ep and memo[job.nf - 1 - f].iseq == r.iseq \
                        and not (f + 1 < job.nf and u64_at(base, (f + 1) * self.L.cfp_size + self.L.cfp_iseq) == 0):
                    # the same ISeq on the same env at this depth as in the last read: the same
                    # method entry (no ep words needed; but above a frame without ISeq, maybe a C
                    # function's, finish_job needs this frame's flags)
                    r.me = memo[job.nf - 1 - f].me
                    r.me_known = 1
                    continue
                lo = r.ep - 16
                hi = r.ep + 8
                if lo >= c.vm_stack and hi <= job.cfp:     # in its VM stack
                    if job.need_hi == 0 or lo < job.need_lo:
                        job.need_lo = lo
                    if hi > job.need_hi:
                        job.need_hi = hi
                # the job's spans so far (few: its VM stack, and heap envs of escaped blocks)
                cl = NULL
                for k in range(<int>job.cluster0, <int>nclusters):
                    if self.clusters[k].preread:
                        if lo >= self.clusters[k].lo and hi <= self.clusters[k].hi:
                            cl = &self.clusters[k]
                            break
                        continue
                    # within EP_GAP of the span, and the merged span no longer than EP_SPAN_MAX
                    if lo <= self.clusters[k].hi + EP_GAP and hi + EP_GAP >= self.clusters[k].lo \
                            and (hi if hi > self.clusters[k].hi else self.clusters[k].hi) \
                            - (lo if lo < self.clusters[k].lo else self.clusters[k].lo) <= EP_SPAN_MAX:
                        cl = &self.clusters[k]
                        break
                if cl != NULL:
                    if lo < cl.lo:
                        cl.lo = lo
                    if hi > cl.hi:
                        cl.hi = hi
                    r.ep_off = <uint64_t>(cl - self.clusters)
                    continue
                else:
                    if grow(<void **>&self.clusters, &self.cluster_cap, nclusters + 1, sizeof(Cluster)) != 0:
                        return -1
                    cl = &self.clusters[nclusters]
                    nclusters += 1
                    cl.lo = lo
                    cl.hi = hi
                    cl.preread = 0
                r.ep_off = nclusters - 1          # the cluster, for now
            job.cluster1 = nclusters
            if job.result != R_OK:
                nclusters = job.cluster0    # its spans are not read
                job.cluster1 = nclusters
        for j in range(nclusters):
            if not self.clusters[j].preread:
                self.clusters[j].arena_off = ep_total
                ep_total += self.clusters[j].hi - self.clusters[j].lo
                fresh += 1
        if grow(<void **>&self.eparena, &self.ep_cap, ep_total + 8, 1) != 0:
            return -1
        for j in range(first, first + n):
            job = &self.jobs[j]
            if job.result != R_OK:
                continue
            for f in range(job.nf):
                r = &self.raw[job.frame0 + f]
                if r.ep_off != NO_EP:
                    cl = &self.clusters[r.ep_off]
                    r.ep_off = cl.arena_off + (r.ep - 16 - cl.lo)
            if job.need_hi > job.need_lo:   # the next read's window: the top of what this one needed
                c = &self.cache[job.slot]
                c.win_hi = job.need_hi
                c.win_lo = job.need_lo if job.need_hi - job.need_lo <= WIN_MAX else job.need_hi - WIN_MAX
            if not job.cfp2_ok:
                fresh += 1
        # phase 3 is needed when a span is not in a window, or a thread's cfp was not read again
        # after its frames in phase 1; it then reads every thread's cfp again, after all the spans
        if fresh:
            for j in range(first, first + n):
                job = &self.jobs[j]
                if job.result != R_OK:
                    continue
                for f in range(job.cluster0, job.cluster1):
                    cl = &self.clusters[f]
                    if not cl.preread:
                        self.add_req(cl.lo, cl.hi - cl.lo, AREA_EP, cl.arena_off, j, R_TORN)
                self.add_req(job.ec + self.L.ec_cfp, 8, AREA_JOB_CFP2, 0, j, R_TORN)
            if self.batch.n and self.run_reqs() != 0:
                return -1
        else:
            self.phase3_skips += 1
        # 3b. (reads only at first sight) the method entry of every Ruby frame
        for j in range(first, first + n):
            if self.jobs[j].result == R_OK:
                self.find_mes(&self.jobs[j])
        return 0

    # ------------------------------------------------------------ method entries of Ruby frames
    # Ruby's rb_vm_frame_method_entry: from the frame's ep, while the env is not local
    # (ep[0] & VM_ENV_FLAG_LOCAL), ep[-2] is the method entry if it is an imemo_ment, else go to
    # the previous env (ep[-1] & ~3); at the local env ep[-2] is a ment, a cref (no method) or an
    # svar holding cref_or_me. The ep words come from phase 3's spans (one VM stack: the
    # previous env of a block is mostly a deeper frame's, already read); heap envs (escaped
    # blocks, procs) not in the spans and the type of each ep[-2] value are read at first sight.
    cdef uint32_t value_type(self, uint64_t v, uint64_t *inner) noexcept nogil:
        cdef uint64_t buf[2]
        cdef uint32_t t
        cdef TypeEnt ent
        cdef const TypeEnt *known
        inner[0] = 0
        if v < 4096 or (v & 7):
            return IMEMO_NONE           # Qfalse, Qnil, special constants
        known = <const TypeEnt *>sdb_intern_find_u64(&self.types, sdb_mix64(v), v)
        if known != NULL:
            inner[0] = known.inner
            return known.type
        t = IMEMO_NONE
        if self.read1(v, buf, 16) == 16 and (buf[0] & 0x1f) == 0x1a:
            t = <uint32_t>((buf[0] >> 12) & 0xf)
            if t == IMEMO_SVAR:
                inner[0] = buf[1]
        elif self.read1(v, buf, 8) != 8:
            return IMEMO_NONE           # unreadable now: not cached
        ent.addr = v
        ent.type = t
        ent.inner = inner[0]
        ent.pad = 0
        sdb_intern_insert(&self.types, sdb_mix64(v), &ent)     # not cached when memory runs out
        return t

    cdef inline uint64_t check_me(self, uint64_t v, int can_be_svar) noexcept nogil:
        """Ruby's check_method_entry: v if it is a method entry, the svar's one, else 0."""
        cdef uint64_t inner, unused
        cdef uint32_t t = self.value_type(v, &inner)
        if t == IMEMO_MENT:
            return v
        # (the inner value's own out-parameter is another variable: value_type zeroes it first)
        if t == IMEMO_SVAR and can_be_svar and self.value_type(inner, &unused) == IMEMO_MENT:
            return inner
        return 0

    cdef uint64_t env_me(self, const Job *job, const uint64_t *epd) noexcept nogil:
        """The method entry for a frame whose ep[-2..0] are epd[0..2]."""
        cdef uint64_t words[3]
        cdef uint64_t me, p
        cdef uint32_t level, k
        cdef const Cluster *cl
        cdef const uint64_t *d = epd
        for level in range(ME_WALK_MAX):
            if d[2] & ENV_FLAG_LOCAL:
                return self.check_me(d[0], 1)
            me = self.check_me(d[0], 0)
            if me != 0:
                return me
            p = d[1] & ~(<uint64_t>3)
            if p < 16 or p >= ADDR_MAX or (p & 7):
                return 0                    # no env there (torn, or garbage: never used as an offset)
            d = NULL
            for k in range(job.cluster0, job.cluster1):
                cl = &self.clusters[k]
                if p >= cl.lo + 16 and p + 8 <= cl.hi:
                    d = <const uint64_t *>(self.eparena + cl.arena_off + (p - 16 - cl.lo))
                    break
            if d == NULL:
                if self.read1(p - 16, words, 24) != 24:     # a heap env
                    return 0
                d = words
        return 0

    cdef void find_mes(self, Job *job) noexcept nogil:
        """Every Ruby frame's method entry: from the thread's previous read (same ISeq and env at
        the same depth, set in phase 3), else by the walk. Remembered for the next read."""
        cdef SlotCache *c = &self.cache[job.slot]
        cdef RawFrame *r
        cdef MeMemo *m
        cdef uint32_t j, cs
        cdef int memo = not job.truncated
        if memo and c.memo_cap < job.nf + 1:
            cs = job.nf + 16
            m = <MeMemo *>realloc(c.memo, cs * sizeof(MeMemo))
            if m == NULL:
                memo = 0
            else:
                c.memo = m
                c.memo_cap = cs
        for j in range(job.nf):
            r = &self.raw[job.frame0 + j]
            if r.me_known:
                continue                                 # its memo entry holds it already
            m = &c.memo[job.nf - 1 - j] if memo else NULL
            if r.iseq != 0 and r.pc != 0 and r.ep_off != NO_EP:
                r.me = self.env_me(job, <const uint64_t *>(self.eparena + r.ep_off))
                if m != NULL:
                    m.ep = r.ep
                    m.iseq = r.iseq
                    m.me = r.me
            elif m != NULL:
                m.ep = 0
        c.nmemo = job.nf if memo else 0

    cdef inline int frame_jit(self, const Job *job, uint32_t j) noexcept nogil:
        """1 if Ruby frame j was pushed by YJIT: its jit_return is set (the interpreter clears it).
        YJIT writes such a frame's pc only when the frame calls out, so the pc can be the one an
        older frame left in the slot (v3_3_8:yjit/src/codegen.rs, gen_send_iseq)."""
        return self.L.cfp_jit_return != LAYOUT_NA and self.L.cfp_jit_return != 0 \
            and u64_at(self.rawbuf + job.raw_off, j * self.L.cfp_size + self.L.cfp_jit_return) != 0

    cdef int link_ok(self, Job *job, uint32_t j, RawFrame *r) noexcept nogil:
        """0 when Ruby frame j (a method's) cannot be the callee of the Ruby frame below it. A call
        sets the caller's sp to its receiver's slot and puts the method's locals and env right
        after it (vm_call_iseq_setup_normal): ep = caller's sp + (local_table_size + 3) words. A
        frame the thread left, still in memory above a Ruby frame it entered since, sits where its
        old caller's sp was: it fails this unless the new frame has the same sp there. 1 when the
        link holds or cannot be checked (no such field in the row, a block or other frame, a C
        caller: checked by FINISH, an env moved to the heap), or the frame is deeper than LINK_DEPTH from the leaf (a frame
        is left behind by a return and a call within the microseconds of a copy: near the leaf;
        this bounds the cost on deep stacks). The caller's sp in memory can lag what it runs (the
        interpreter may keep it in a register between calls): a live frame's own link is always
        exact, a frame left behind can pass when the new caller's sp is where the old one's was."""
        cdef IseqEnt *e
        cdef IseqEnt *pe
        cdef RawFrame *p
        cdef uint64_t psp, vm_stack
        # (0: an older gem's file, where these were reserved and zero)
        if self.L.body_local_table_size == LAYOUT_NA or self.L.body_local_table_size == 0 \
                or self.L.cfp_sp == LAYOUT_NA or self.L.cfp_sp == 0 or j + 1 >= job.nf \
                or j >= LINK_DEPTH:
            return 1
        p = &self.raw[job.frame0 + j + 1]
        if p.iseq == 0 or p.pc == 0:
            return 1
        e = self.iseq_lookup(r.iseq)
        if not (e != NULL and r.pc >= e.encoded and r.pc <= e.encoded + e.size * 8):
            if self.check_iseq(r.iseq, r.pc, job.lo_ns, self.frame_jit(job, j)) == 0:
                return 0
            e = self.iseq_lookup(r.iseq)
            if e == NULL:
                return 0
        if e.type != ISEQ_TYPE_METHOD or e.locals >= 65536:
            return 1
        # an env Ruby moved to the heap (a block of the method became a Proc: vm_make_env_each sets
        # cfp->ep to the copy) has no place relative to the caller's sp: nothing to check. Sidekiq's
        # Processor#dispatch is one (its blocks go to methods taking &block): every read of a job's
        # stack was dropped before this
        vm_stack = u64_at(job.hdr, self.L.ec_vm_stack)
        if r.ep < vm_stack or r.ep >= vm_stack + u64_at(job.hdr, self.L.ec_vm_stack_size) * 8:
            return 1
        # the caller a method or a block (an eval's or a class body's sp may lie elsewhere: the
        # binding's env); known from this or an earlier read, else not checked
        pe = self.iseq_lookup(p.iseq)
        if pe == NULL or (pe.type != ISEQ_TYPE_METHOD and pe.type != ISEQ_TYPE_BLOCK):
            return 1
        psp = u64_at(self.rawbuf + job.raw_off, (j + 1) * self.L.cfp_size + self.L.cfp_sp)
        return r.ep == psp + (<uint64_t>e.locals + 3) * 8

    cdef int finish_job(self, Job *job, uint64_t now) noexcept nogil:
        """Phase 4 for one job: checks, interning, the sample. Returns an R_* outcome."""
        cdef const sdb_slot *s = <const sdb_slot *>(self.reg.base + self.reg.slots_offset
                                                    + <size_t>job.slot * self.reg.slot_size)
        cdef SlotCache *c = &self.cache[job.slot]
        cdef uint64_t shallow, magic, ep0
        cdef uint32_t j, k, nunstable, n_out, cs
        cdef int64_t fid, sid
        cdef RawFrame *r
        cdef FrameEnt *f
        cdef const uint64_t *epd
        cdef int same, ck
        # the copy window as the trace keeps it, in whole us back from `now` (rounded out): names
        # first read for this sample hold from exactly the window's start the trace will show
        job.lo_ns = now - (now - job.lo_ns + 999) // 1000 * 1000 if now > job.lo_ns else now
        cdef FrameEnt *pf
        cdef uint32_t *pi
        if sdb_load_acquire_u64(&s.gen) != job.gen:
            return R_GONE                  # the thread left, or its slot changed, during the read
        shallow = job.cfp2 if job.cfp2 > job.cfp else job.cfp
        nunstable = 0
        if shallow > job.cfp:
            # frames above the shallowest frame pointer seen; a garbage pointer makes them all unstable
            nunstable = job.nf if (shallow - job.cfp) / self.L.cfp_size > job.nf \
                else <uint32_t>((shallow - job.cfp) / self.L.cfp_size)

        # classify and check, innermost first
        n_out = 0
        if ((job.state == STATE_RUNNING and sdb_load_relaxed_u32(&self.reg.hdr.gc_active))
                or (self.gc_words_read == 2 and job.ec == self.running_ec_word and job.state != STATE_BLOCKED
                    and (self.gc_flags_word >> self.L.gc_during_bit) & 1)):
            # the VM is in GC and this thread holds the GVL: it is the one collecting. 3.3+: the
            # gem's GC_ENTER/GC_EXIT hook keeps the header's word. 3.1: objspace->flags.during_gc,
            # read in this thread's read, and its ec is the one that last took the GVL
            f = &self.cur[0]
            f.kind = KIND_GC
            f.iseq = 0
            f.pc = 0
            f.me = 0
            f.pad = 0
            n_out = 1
            self.gc_samples += 1
        if nunstable >= job.nf:
            return R_TORN
        for j in range(nunstable, job.nf):
            r = &self.raw[job.frame0 + j]
            f = &self.cur[n_out]
            f.pad = 0
            if r.iseq != 0 and r.pc != 0:
                if not self.link_ok(job, j, r):
                    return R_TORN
                if j + 1 < job.nf and self.raw[job.frame0 + j + 1].iseq == 0 \
                        and self.raw[job.frame0 + j + 1].ep_off != NO_EP \
                        and ((<const uint64_t *>(self.eparena + self.raw[job.frame0 + j + 1].ep_off))[2]
                             & MAGIC_MASK) == MAGIC_CFUNC:
                    # called by a C function: Ruby marks such a frame FINISH (vm_call0, invoke_block);
                    # without it, this is a frame the thread left, still in memory above the C
                    # function it has called since. A C function's frame is known by its ISeq 0
                    # and its magic, never by its pc: YJIT leaves a C frame's pc as the slot held
                    # it (gen_send_cfunc), and a frame copied while the interpreter writes it can
                    # show the C function's ISeq 0 beside the pc of the Ruby frame it replaces
                    if r.ep_off == NO_EP or ((<const uint64_t *>(self.eparena + r.ep_off))[2]
                                             & FRAME_FLAG_FINISH) == 0:
                        return R_TORN
                f.kind = KIND_RUBY          # checked below: a real ISeq with pc inside it
                f.iseq = r.iseq
                f.pc = r.pc
                f.me = r.me
                f.pad = self.frame_jit(job, j)     # its pc may be an older frame's (below)
                n_out += 1
                continue
            if r.ep_off == NO_EP:
                return R_TORN               # a frame with no env: copied while it was written
            epd = <const uint64_t *>(self.eparena + r.ep_off)      # ep[-2], ep[-1], ep[0]
            ep0 = epd[2]
            magic = ep0 & MAGIC_MASK
            if r.iseq == 0 and magic == MAGIC_CFUNC:
                f.kind = KIND_CFUNC
                f.iseq = 0
                f.pc = 0
                f.me = epd[0]
                if f.me == 0 or self.check_me(f.me, 0) == 0:
                    return R_TORN       # ep[-2] is not a method entry: read while the frame changed
                n_out += 1
            elif r.iseq != 0 and magic == MAGIC_IFUNC:
                f.kind = KIND_OTHER
                f.iseq = 0
                f.pc = 0
                f.me = 0
                n_out += 1
            elif magic != MAGIC_DUMMY and magic != MAGIC_TOP and magic != MAGIC_EVAL:
                return R_TORN               # a method, block or class frame without ISeq and pc: half written
        if job.truncated:
            f = &self.cur[n_out]
            f.kind = KIND_TRUNCATED
            f.iseq = 0
            f.pc = 0
            f.me = 0
            f.pad = 0
            n_out += 1

        # frames equal (root-aligned) to this thread's previous sample were checked then;
        # the rest are checked now and interned
        same = c.has_prev and c.nprev == n_out
        for j in range(n_out):
            f = &self.cur[j]
            k = n_out - 1 - j
            if c.has_prev and k < c.nprev:
                if (c.prev[k].iseq == f.iseq and c.prev[k].pc == f.pc and c.prev[k].me == f.me
                        and c.prev[k].kind == f.kind):
                    self.ids[j] = c.prev_ids[k]
                    f.pad = 0
                    continue
            same = 0
            # a name read later for an address first seen here must hold from the earliest moment
            # these frames may have been copied (the drainer proves nothing was born there since)
            if f.kind == KIND_RUBY:
                ck = self.check_iseq(f.iseq, f.pc, job.lo_ns, f.pad)
                f.pad = 0
                if ck == 0:
                    return R_TORN
                if ck == 2:
                    # YJIT's frame of a real ISeq whose pc is not inside it: the slot's older pc
                    # (YJIT had no call out to save it for). The method is sure, the line is not:
                    # pc 0, no line (Ruby itself gives YJIT's top frame line 0)
                    f.pc = 0
                    self.yjit_pcs += 1
                self.note_me(f.me, job.lo_ns)
            elif f.kind == KIND_CFUNC:
                self.note_me(f.me, job.lo_ns)
            fid = self.intern_frame(f)
            if fid < 0:
                return R_FATAL
            self.ids[j] = <uint32_t>fid
        if same:
            sid = c.prev_stack
        else:
            sid = self.intern_stack(self.ids, n_out)
            if sid < 0:
                return R_FATAL
            if c.cap < n_out + 1:
                cs = n_out + 16
                c.has_prev = 0              # until both arrays hold cs entries
                pf = <FrameEnt *>realloc(c.prev, cs * sizeof(FrameEnt))
                if pf == NULL:
                    return R_FATAL
                c.prev = pf
                pi = <uint32_t *>realloc(c.prev_ids, cs * sizeof(uint32_t))
                if pi == NULL:
                    return R_FATAL
                c.prev_ids = pi
                c.cap = cs
            for j in range(n_out):
                c.prev[n_out - 1 - j] = self.cur[j]
                c.prev_ids[n_out - 1 - j] = self.ids[j]
            c.nprev = n_out
            c.prev_stack = <uint32_t>sid
            c.has_prev = 1

        return self.emit(job, <uint32_t>sid, now, job.lo_ns, job.ec)

    cdef int emit(self, const Job *job, uint32_t sid, uint64_t now, uint64_t lo_ns, uint64_t ec) noexcept nogil:
        """A sample at `now` of stack `sid`, whose frames were copied no earlier than lo_ns, a whole
        number of us before it (finish_job rounds it so; a stack known unchanged since an earlier
        read: lo_ns = now), read on ec. Its span is the slot's when the slot was taken, if the slot
        still says so now (serials are never reused) and that span began on this ec (fiber)."""
        cdef uint64_t win = (now - lo_ns) // 1000
        cdef uint64_t span = 0
        cdef const sdb_slot *s
        if job.span0 != 0:
            s = <const sdb_slot *>(self.reg.base + self.reg.slots_offset + <size_t>job.slot * self.reg.slot_size)
            if sdb_load_acquire_u64(&s.span) == job.span0 and job.span_ec == ec and ec != 0:
                span = job.span0
            else:
                self.span_unsure += 1
        if grow(<void **>&self.g.samples, &self.g.sample_cap, self.g.sample_len + 1, sizeof(SampleEnt)) != 0:
            return R_FATAL
        self.g.samples[self.g.sample_len].t_ns = now
        if win > 0xffffffffUL:
            win = 0xffffffffUL
        self.g.samples[self.g.sample_len].win_us = <uint32_t>win
        self.g.samples[self.g.sample_len].serial = job.serial
        self.g.samples[self.g.sample_len].stack = sid
        self.g.samples[self.g.sample_len].state = job.state
        self.g.samples[self.g.sample_len].span = span
        self.g.samples[self.g.sample_len].tick = self.ticks
        self.g.sample_len += 1
        self.total_samples += 1
        return R_OK

    cdef inline int still_idle(self, const Job *job) noexcept nogil:
        """The gem's state word says idle, and is the word seen before the last read (which was
        of the thread idle): it has not taken the GVL since, so its stack is the one read then."""
        cdef const SlotCache *c = &self.cache[job.slot]
        return (c.idle_valid and c.has_prev and c.idle_word == job.word
                and (job.state == STATE_BLOCKED or job.state == STATE_GVL_WAIT))

    cdef inline void note_idle(self, const Job *job) noexcept nogil:
        cdef SlotCache *c = &self.cache[job.slot]
        c.idle_valid = (job.result == R_OK and not job.from_status
                        and (job.state == STATE_BLOCKED or job.state == STATE_GVL_WAIT))
        c.idle_word = job.word

    # Ruby 3.1 has no GVL hooks, so the gem cannot count a thread's runs. The kernel counts them:
    # schedstat's third field is the number of times the thread was switched in. A read taken while
    # the kernel had the thread asleep throughout (count c, state letter S or D, then the stack,
    # then the count still c) is its stack for as long as the count stays c: it cannot run Ruby
    # code without being switched in. That costs one pread per tick instead of a stack read.
    cdef int still_asleep(self, Job *job) noexcept nogil:
        """3.1: 1 when the thread's last read was taken asleep and procfs says it has not been
        switched in since (job.state is then that read's state); 2 when the kernel view says so (a
        candidate: kv_confirm checks th->status first). Otherwise 0, and job is prepared for the
        checks of note_asleep."""
        cdef SlotCache *c = &self.cache[job.slot]
        cdef uint64_t now_count
        job.switch_ins0 = 0
        job.letter0 = 0
        job.kv_used = 0
        if job.state != STATE_UNKNOWN or not self.th_len or not c.has_prev:
            return 0                         # Ruby >= 3.2 (the gem's run count does this), or no stack yet
        if sdb_kv_holds(&self.kv, &c.ts, job.tid, &now_count, &self.cache[0].ts, sizeof(SlotCache), self.hwm):
            # the kernel view: a thread read blocked and off CPU whose word is unchanged was not put
            # on a CPU since, unless the view missed the switch: kv_confirm checks th->status
            if now_count & KV_UNKNOWN:
                now_count = sdb_kv_settle(&self.kv, &c.ts, self.task_dir, job.tid, now_count, self.tick_ns)
            job.kv0 = now_count
            job.kv_used = 1
            if c.ts.asleep and now_count == c.ts.kv_word:
                return 2        # a candidate: kv_confirm reads th->status before the stack is reused
            c.ts.asleep = 0
            return 0
        if not c.ts.asleep and not c.ts.was_idle:
            return 0                         # running last time: read it, no syscalls spent on it
        now_count = sdb_switch_ins(&c.ts, self.task_dir, job.tid)
        if c.ts.asleep and now_count != 0 and now_count == c.ts.switch_ins:
            job.state = c.ts.asleep_state
            return 1
        c.ts.asleep = 0
        if now_count != 0:
            job.switch_ins0 = now_count
            job.letter0 = sdb_kernel_state(&c.ts, self.task_dir, job.tid)
        return 0

    cdef void note_asleep(self, Job *job) noexcept nogil:
        cdef SlotCache *c = &self.cache[job.slot]
        cdef int idle = job.result == R_OK and (job.state == STATE_BLOCKED or job.state == STATE_GVL_WAIT)
        if not job.from_status:
            return
        c.ts.was_idle = idle
        c.ts.asleep = 0
        if job.kv_used:
            # off CPU (and known) before the read, and not put on a CPU until after it: the stack read
            # is the thread's stack until its word changes. Only for a thread the VM has blocked
            # (sleep, IO, a lock, a queue): the view can miss a switch (no program runs on
            # sched_switch for a moment while another attaches to it or leaves it:
            # benchmarks/kview_misses.py), and a runnable thread then runs Ruby with its word
            # unchanged; a blocked one first sets th->status RUNNABLE, which kv_confirm reads.
            if (job.result == R_OK and job.state == STATE_BLOCKED
                    and (job.kv0 & (KV_ON_CPU | KV_UNKNOWN)) == 0
                    and sdb_load_acquire_u64(&self.kv.words[job.tid & self.kv.mask]) == job.kv0):
                c.ts.asleep = 1
                c.ts.asleep_state = job.state
                c.ts.kv_word = job.kv0
            return
        if idle and job.switch_ins0 != 0 and (job.letter0 == 83 or job.letter0 == 68) \
                and sdb_switch_ins(&c.ts, self.task_dir, job.tid) == job.switch_ins0:       # 'S', 'D'
            c.ts.asleep = 1
            c.ts.asleep_state = job.state
            c.ts.switch_ins = job.switch_ins0

    # ------------------------------------------------------------ one tick
    cdef void thread_event(self, const sdb_slot *copy, uint32_t ended, uint64_t serial, uint64_t now) noexcept nogil:
        cdef ThreadEvt *e
        if grow(<void **>&self.g.tevts, &self.g.tevt_cap, self.g.tevt_len + 1, sizeof(ThreadEvt)) != 0:
            return
        e = &self.g.tevts[self.g.tevt_len]
        self.g.tevt_len += 1
        memset(e, 0, sizeof(ThreadEvt))
        e.ended = ended
        e.serial = serial
        e.at_ns = now
        if copy != NULL:
            e.tid = copy.native_tid
            e.start_ns = copy.start_mono_ns
            e.flags = copy.flags
            memcpy(e.name, copy.name, 64)
            e.name[63] = 0

    cdef uint32_t state_from_status(self, Job *job) noexcept nogil:
        """Ruby 3.1: the state th->status says (native/tstate.c); read_jobs asks the kernel which
        runnable thread waits for the GVL."""
        return sdb_state_from_status((job.th[self.L.thread_status - self.th_lo] >> self.L.thread_status_shift)
                                     & self.L.thread_status_mask)

    cdef int take_slot(self, uint32_t idx, uint64_t now, Job *job) noexcept nogil:
        """Copies slot idx under its seqlock into job; thread events on changes. 0: nothing to sample."""
        cdef const sdb_slot *s = <const sdb_slot *>(self.reg.base + self.reg.slots_offset
                                                    + <size_t>idx * self.reg.slot_size)
        cdef SlotCache *c = &self.cache[idx]
        cdef sdb_slot copy
        cdef uint64_t g1
        cdef int tries
        for tries in range(2):
            g1 = sdb_load_acquire_u64(&s.gen)
            if g1 & 1:
                continue
            memcpy(&copy, <const void *>s, sizeof(sdb_slot))
            sdb_fence_acquire()
            if sdb_load_acquire_u64(&s.gen) == g1:
                break
        else:
            return 0                        # being written right now: next tick
        if copy.live and copy.serial == c.ended_serial:
            return 0                        # ended (th->status), its slot not yet handed back
        if not copy.live:
            if c.serial != 0:
                self.thread_event(NULL, 1, c.serial, now)
                c.serial = 0
                c.has_prev = 0
                sdb_tstate_close(&c.ts)
            return 0
        if c.serial != copy.serial:
            if c.serial != 0:
                self.thread_event(NULL, 1, c.serial, now)
                sdb_tstate_close(&c.ts)
            c.serial = copy.serial
            c.gen = g1
            c.ec = 0
            c.has_prev = 0
            c.nmemo = 0
            self.threads_seen += 1
            self.thread_event(&copy, 0, copy.serial, now)
        elif c.gen != g1:
            c.gen = g1
            self.thread_event(&copy, 0, copy.serial, now)
        job.slot = idx
        job.result = R_OK
        job.serial = copy.serial
        job.gen = g1
        job.ec_addr = copy.ec_addr
        job.thread_addr = copy.thread_addr
        job.tid = copy.native_tid
        job.word = copy.state
        job.state = copy.state & 0xff
        job.kv_cand = 0
        job.span0 = sdb_load_acquire_u64(&s.span)     # span before span_ec: the gem stores them the other way
        job.span_ec = sdb_load_acquire_u64(&s.span_ec)
        return 1

    cdef void end_by_status(self, Job *job, uint64_t now) noexcept nogil:
        """The thread of a live slot has ended (Ruby 3.1's th->status): its thread_end now; the slot
        is not read again until the gem hands it back (its next registration sweeps it)."""
        cdef SlotCache *c = &self.cache[job.slot]
        if c.serial != job.serial:
            return
        self.thread_event(NULL, 1, c.serial, now)
        c.ended_serial = c.serial
        c.serial = 0
        c.has_prev = 0
        sdb_tstate_close(&c.ts)

    cdef int kv_confirm(self, uint32_t n, uint64_t now) noexcept nogil:
        """3.1, the kernel view: jobs[:n] hold candidates (kv_cand), threads read blocked last time
        whose word has not changed since. One batched read of their th->status and th->ec: a thread
        still blocked, on the same ec, with its word still unchanged after that read, ran no Ruby
        since (a blocked thread sets th->status RUNNABLE before it runs any): its last stack is
        sampled again. The others are read in full. Returns the jobs left to read, or -1."""
        cdef uint32_t j, m = 0
        cdef Job *job
        cdef SlotCache *c
        cdef uint64_t word
        for j in range(n):
            job = &self.jobs[j]
            if job.kv_cand:
                self.add_req(job.thread_addr + self.th_lo, self.th_len, AREA_JOB_TH, 0, j, R_GONE)
        if self.run_reqs() != 0:
            return -1
        for j in range(n):
            job = &self.jobs[j]
            if job.kv_cand:
                job.kv_cand = 0
                c = &self.cache[job.slot]
                word = sdb_load_acquire_u64(&self.kv.words[job.tid & self.kv.mask])
                if (job.result == R_OK and self.state_from_status(job) == STATE_BLOCKED
                        and u64_at(job.th, self.L.thread_ec - self.th_lo) == c.ec and word == c.ts.kv_word):
                    job.state = c.ts.asleep_state
                    if self.emit(job, c.prev_stack, now, now, c.ec) != R_OK:
                        return -1
                    self.reused += 1
                    continue
                c.ts.asleep = 0
                job.result = R_OK
            if m != j:
                self.jobs[m] = self.jobs[j]
            m += 1
        return <int>m

    cdef int tick(self, uint64_t now) noexcept nogil:
        """Sample every registered thread once. Returns R_FATAL when the target is gone."""
        cdef bint wake
        cdef uint32_t i, hwm, n = 0, ntorn = 0, ncand = 0
        cdef uint64_t t0
        cdef int rc, k
        cdef const sdb_slot *s
        # slots ever used: the gem hands out low indices first
        hwm = self.hwm
        while hwm < self.nslots:
            s = <const sdb_slot *>(self.reg.base + self.reg.slots_offset + <size_t>hwm * self.reg.slot_size)
            if sdb_load_acquire_u64(&s.gen) == 0:
                break
            hwm += 1
        self.hwm = hwm
        self.tick_ns = now
        t0 = sdb_now_ns()
        pthread_mutex_lock(&self.mu)
        if grow(<void **>&self.jobs, &self.job_cap, 2 * <uint64_t>hwm + 2, sizeof(Job)) != 0:
            pthread_mutex_unlock(&self.mu)
            return R_FATAL
        for i in range(hwm):
            if self.take_slot(i, now, &self.jobs[n]):
                if self.still_idle(&self.jobs[n]):
                    # blocked or waiting for the GVL since the last read, and it has not taken the
                    # GVL since (the gem counts every time it does): it ran no Ruby, same stack
                    if self.emit(&self.jobs[n], self.cache[i].prev_stack, now, now, self.cache[i].ec) != R_OK:
                        pthread_mutex_unlock(&self.mu)
                        return R_FATAL
                    self.reused += 1
                else:
                    k = self.still_asleep(&self.jobs[n])
                    if k == 1:
                        if self.emit(&self.jobs[n], self.cache[i].prev_stack, now, now, self.cache[i].ec) != R_OK:
                            pthread_mutex_unlock(&self.mu)
                            return R_FATAL
                        self.reused += 1
                    else:
                        self.jobs[n].kv_cand = k == 2
                        ncand += k == 2
                        n += 1
        if ncand:
            rc = self.kv_confirm(n, now)
            if rc < 0:
                pthread_mutex_unlock(&self.mu)
                return R_FATAL
            n = <uint32_t>rc
        rc = R_OK
        if n and self.read_jobs(0, n) != 0:
            rc = R_FATAL
        if rc == R_OK:
            for i in range(n):
                if self.jobs[i].result == R_OK:
                    self.jobs[i].result = self.finish_job(&self.jobs[i], self.jobs[i].read_ns)
                    self.note_idle(&self.jobs[i])
                    self.note_asleep(&self.jobs[i])
                if self.jobs[i].result == R_TORN:       # retried below, together
                    self.jobs[n + ntorn] = self.jobs[i]
                    self.jobs[n + ntorn].result = R_OK
                    ntorn += 1
                elif self.jobs[i].result == R_GONE:
                    self.errors += 1
                elif self.jobs[i].result == R_ENDED:
                    self.end_by_status(&self.jobs[i], now)
                elif self.jobs[i].result == R_FATAL:
                    rc = R_FATAL
            if ntorn and rc == R_OK:
                if self.read_jobs(n, ntorn) != 0:
                    rc = R_FATAL
                else:
                    for i in range(n, n + ntorn):
                        if self.jobs[i].result == R_OK:
                            self.jobs[i].result = self.finish_job(&self.jobs[i], self.jobs[i].read_ns)
                            self.note_idle(&self.jobs[i])
                        if self.jobs[i].result == R_OK:
                            self.retried += 1
                        elif self.jobs[i].result == R_TORN:
                            self.torn += 1
                        elif self.jobs[i].result == R_GONE:
                            self.errors += 1
                        elif self.jobs[i].result == R_ENDED:
                            self.end_by_status(&self.jobs[i], now)
                        elif self.jobs[i].result == R_FATAL:
                            rc = R_FATAL
        if rc == R_OK:
            self.ticks += 1
            self.last_tick_ns = now
        # something new to name (an ISeq, a frame's line, a method): read from the target while
        # it still holds, so wake the drain loop now rather than at its next regular drain
        wake = self.wake_fd >= 0 and not self.wake_sent and (
            self.frames.count > self.frames_drained or self.g.new_iseq_len or self.g.new_me_len)
        if wake:
            self.wake_sent = 1
        pthread_mutex_unlock(&self.mu)
        if wake:
            sdb_eventfd_signal(self.wake_fd)
        self.read_ns_total += sdb_now_ns() - t0
        return rc

    # ------------------------------------------------------------ the loop
    def run(self, double duration_s=0.0):
        """Tick until stop() is called, duration_s passes (0: no limit) or the target goes away.
        Runs without the GIL. Returns "stopped", "duration" or "target-exited"/"permission"."""
        cdef uint64_t start, deadline, limit, now, k, jitter
        cdef int rc = R_OK
        cdef str why = "stopped"
        with nogil:
            sdb_timer_slack(min(max(self.period_ns // 20, 1000), 50000))
            start = sdb_now_ns()
            self.start_ns = start
            limit = start + <uint64_t>(duration_s * 1e9) if duration_s > 0 else 0
            k = 0
            while not sdb_load_flag(&self.stop_flag):
                # tick k is due at start + k*period, moved by up to +-5% against lock-step
                jitter = sdb_xorshift(&self.rng) % (2 * self.jitter_ns + 1) if self.jitter_ns and k else self.jitter_ns
                deadline = start + k * self.period_ns + jitter - self.jitter_ns
                sdb_sleep_until(deadline)
                now = sdb_now_ns()
                if limit and now >= limit:
                    rc = -1
                    break
                if now > deadline + self.period_ns // 2:
                    self.late += 1
                rc = self.tick(now)
                if rc == R_FATAL:
                    break
                k += 1
                # never bunch: ticks whose time is already more than half a period past are skipped
                now = sdb_now_ns()
                while start + k * self.period_ns + self.period_ns // 2 < now:
                    k += 1
                    self.missed += 1
        if rc == -1:
            why = "duration"
        elif rc == R_FATAL:
            why = "target-exited" if self.fatal_errno == ESRCH else "permission"
        return why

    def stop(self):
        sdb_store_flag(&self.stop_flag, 1)

    def set_wake_fd(self, int fd):
        """An eventfd (non-blocking) the loop writes to when it gathered something that must be named
        soon (a new ISeq, frame or method entry: read from the target while it still holds), at most
        once between two drains. -1: none."""
        self.wake_fd = fd

    def sample_once(self):
        """One tick now (for snapshot). Returns False when the target is gone."""
        cdef int rc
        with nogil:
            rc = self.tick(sdb_now_ns())
        return rc != R_FATAL

    # ------------------------------------------------------------ hand-over
    def drain(self, bint encode_samples=False, bint reset=False):
        """Everything gathered since the last drain, as Python objects (a dict). encode_samples: the
        samples come as one trace record, already msgpack-encoded ("samples_record": bytes, or None
        when there are none; what TraceWriter.samples would write), not as four lists: at 1 kHz
        that is most of what a drain costs in Python.
        reset: then, at the same moment (no tick in between), start over: frame and stack ids from 0,
        every ISeq and method entry new again (handed over anew when next seen), no frame taken from
        a thread's previous sample: what a new trace file needs (rotation), and what keeps the
        tables as small as one file's stacks."""
        cdef uint64_t i, f0, f1, s0, s1, k
        cdef Gathered taken
        cdef SampleEnt *smp
        cdef ThreadEvt *tev
        cdef FrameEnt *fr = NULL
        cdef uint32_t *ar = NULL
        cdef StackEnt *st = NULL
        cdef uint64_t arena0, arena1
        cdef uint64_t cut[12]
        with nogil:
            pthread_mutex_lock(&self.mu)
            taken = self.g
            memset(&self.g, 0, sizeof(Gathered))
            f0 = self.frames_drained
            f1 = self.frames.count
            fr = <FrameEnt *>malloc((f1 - f0 + 1) * sizeof(FrameEnt))
            if fr != NULL and f1 > f0:
                memcpy(fr, sdb_intern_at(&self.frames, f0), (f1 - f0) * sizeof(FrameEnt))
            s0 = self.stacks_drained
            s1 = self.stacks.count
            st = <StackEnt *>malloc((s1 - s0 + 1) * sizeof(StackEnt))
            arena0 = (<StackEnt *>sdb_intern_at(&self.stacks, s0)).off if s1 > s0 else 0
            arena1 = self.arena_len
            ar = <uint32_t *>malloc((arena1 - arena0 + 1) * sizeof(uint32_t))
            if st != NULL and ar != NULL and s1 > s0:
                memcpy(st, sdb_intern_at(&self.stacks, s0), (s1 - s0) * sizeof(StackEnt))
                memcpy(ar, &self.arena[arena0], (arena1 - arena0) * sizeof(uint32_t))
            self.frames_drained = f1
            self.stacks_drained = s1
            self.wake_sent = 0
            if reset:
                # the counters at the cut, with what this drain hands over: the file being closed
                cut[0] = self.ticks; cut[1] = self.late; cut[2] = self.missed; cut[3] = self.total_samples
                cut[4] = self.torn; cut[5] = self.retried; cut[6] = self.errors; cut[7] = self.reused
                cut[8] = self.yjit_pcs; cut[9] = self.span_unsure; cut[10] = self.threads_seen
                cut[11] = self.gc_samples
                self.start_over()
            pthread_mutex_unlock(&self.mu)
        smp = taken.samples
        tev = taken.tevts
        try:
            if fr == NULL or st == NULL or ar == NULL:
                raise MemoryError()
            out = {
                "first_frame": f0,
                "frame_kind": [fr[i].kind for i in range(f1 - f0)],
                "frame_iseq": [fr[i].iseq for i in range(f1 - f0)],
                "frame_pc": [fr[i].pc for i in range(f1 - f0)],
                "frame_me": [fr[i].me for i in range(f1 - f0)],
                "first_stack": s0,
                "stacks": [[ar[st[i].off - arena0 + k] for k in range(st[i].length)] for i in range(s1 - s0)],
                "threads": [
                    {"ended": tev[i].ended, "serial": tev[i].serial, "tid": tev[i].tid,
                     "start_ns": tev[i].start_ns, "at_ns": tev[i].at_ns, "flags": tev[i].flags,
                     "name": (<bytes>tev[i].name).decode("utf-8", "replace")}
                    for i in range(taken.tevt_len)],
                "new_iseqs": [(taken.new_iseqs[i].addr, taken.new_iseqs[i].at_ns) for i in range(taken.new_iseq_len)],
                "new_iseq_encoded": [taken.new_iseqs[i].encoded for i in range(taken.new_iseq_len)],
                "new_mes": [(taken.new_mes[i].addr, taken.new_mes[i].at_ns, taken.new_mes[i].encoded,
                             taken.new_mes[i].klass) for i in range(taken.new_me_len)],
            }
            if reset:
                out["cut"] = dict(zip(("ticks", "late", "missed", "samples", "torn", "retried", "errors", "reused",
                                       "yjit_no_line", "span_unsure", "threads", "gc_samples"),
                                      [cut[i] for i in range(12)]))
            if encode_samples:
                out["samples_record"] = encode_samples_record(smp, taken.sample_len)
            else:
                out["sample_t"] = [smp[i].t_ns for i in range(taken.sample_len)]
                out["sample_thread"] = [smp[i].serial for i in range(taken.sample_len)]
                out["sample_stack"] = [smp[i].stack for i in range(taken.sample_len)]
                out["sample_state"] = [smp[i].state for i in range(taken.sample_len)]
                out["sample_span"] = [smp[i].span for i in range(taken.sample_len)]
                out["sample_tick"] = [smp[i].tick for i in range(taken.sample_len)]
        finally:
            free(taken.samples)
            free(taken.tevts)
            free(taken.new_iseqs)
            free(taken.new_mes)
            free(fr)
            free(st)
            free(ar)
        return out

    def stats(self):
        return {"ticks": self.ticks, "late": self.late, "missed": self.missed, "samples": self.total_samples, "torn": self.torn,
                "retried": self.retried, "errors": self.errors, "gc_samples": self.gc_samples, "reused": self.reused, "threads": self.threads_seen,
                "yjit_no_line": self.yjit_pcs, "span_unsure": self.span_unsure,
                "start_ns": self.start_ns, "last_tick_ns": self.last_tick_ns,
                "read_ns_total": self.read_ns_total}


cdef object encode_samples_record(const SampleEnt *smp, uint64_t n):
    """The trace's samples record for smp[0:n] (native/encode.c), as bytes; None if n is 0."""
    cdef uint8_t *buf
    cdef size_t length
    if n == 0:
        return None
    buf = <uint8_t *>malloc(sdb_encode_samples_bound(n))
    if buf == NULL:
        raise MemoryError()
    try:
        with nogil:
            length = sdb_encode_samples(smp, n, buf)
        return (<char *>buf)[:length]
    finally:
        free(buf)


def encode_samples_for_test(list t_ns, list serial, list stack, list state, list win_us, list span, list tick):
    """encode_samples_record over Python lists (for the tests: compare with msgpack's own encoding)."""
    cdef uint64_t n = len(t_ns), i
    cdef SampleEnt *smp = <SampleEnt *>malloc((n + 1) * sizeof(SampleEnt))
    if smp == NULL:
        raise MemoryError()
    try:
        for i in range(n):
            smp[i].t_ns = t_ns[i]
            smp[i].serial = serial[i]
            smp[i].stack = stack[i]
            smp[i].state = state[i]
            smp[i].win_us = win_us[i]
            smp[i].span = span[i]
            smp[i].tick = tick[i]
        return encode_samples_record(smp, n)
    finally:
        free(smp)


def monotonic_ns():
    return sdb_now_ns()


def wall_ns():
    return sdb_wall_ns()
