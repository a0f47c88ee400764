# The sampler's records and constants, shared by its Cython modules (_reads, _walk, _states,
# _sampler): what a tick works on (Job, RawFrame, Cluster), what it keeps per thread (SlotCache) and
# in its tables (IseqEnt, FrameEnt, StackEnt, TypeEnt), what it hands over (Gathered).
from libc.stdint cimport uint8_t, uint32_t, uint64_t, int64_t
from sdb_sidecar.sampler._encode cimport sdb_sample as SampleEnt
from sdb_sidecar.sampler._tstate cimport sdb_tstate, SDB_STATE_ENDED as STATE_ENDED  # the sidecar's own (tstate.h)
# "not available" and the thread states are the registry's (sdb_registry.h: SDB_NA, SDB_STATE_*),
# under the names the sampler's modules use
from sdb_sidecar.sampler._registry_h cimport (SDB_NA as LAYOUT_NA, SDB_STATE_UNKNOWN as STATE_UNKNOWN,
                                      SDB_STATE_RUNNING as STATE_RUNNING, SDB_STATE_GVL_WAIT as STATE_GVL_WAIT,
                                      SDB_STATE_BLOCKED as STATE_BLOCKED)

# Frame kinds, as in the trace (docs/trace-format.md).
cdef enum:
    KIND_RUBY = 0
    KIND_CFUNC = 1
    KIND_OTHER = 2
    KIND_TRUNCATED = 3
    KIND_GC = 4             # "(garbage collection)": the thread was in GC, on top of its stack

# Ruby's numbers (frame magics, env flags, ISeq and imemo types) are fields of the layout row
# (struct sdb_layout: self.L.frame_magic_cfunc, self.L.imemo_ment, ...), never written here.
cdef enum:
    IMEMO_NONE = 0xffff     # the sampler's own: not an imemo (or unreadable); no imemo type is this
    ME_WALK_MAX = 64        # env levels followed at most (Ruby nests blocks far less deep)

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
    ENV_WORDS_MAX = 8       # a frame's env words read (ep[-env_below/8 .. 0]): the row's may not reach further
    SPEC_FRAMES = 8         # phase 1 also reads the control frames from this many above the last cfp
    WIN_MARGIN = 1024       # ... and the ep words the last read needed in its VM stack, this much wider
    WIN_MAX = 8192          #     on each side, at most this many bytes (the top of the stack)
    ISEQ_SPAN = 32          # bytes read from an ISeq: flags, wrapper, body
    BODY_SPAN = 32          # bytes read from an ISeq body: type, size, encoded
    BODY_SPAN_MAX = 512     # ... and up to local_table_size, where the layout has it
    ME_SPAN = 40            # bytes read from a method entry seen first: flags, defined_class, def, ...
    LINK_DEPTH = 32         # frames from the leaf whose link to their caller is checked (link_ok)

# Outcome of one attempt at reading a thread.
cdef enum:
    R_OK = 0
    R_TORN = 1      # a check failed: retry, then count as torn
    R_GONE = 2      # the thread left (or its slot changed) during the read
    R_ENDED = 3     # Ruby 3.1: th->status says the thread ended (KILLED); its slot is still live
    R_FATAL = 4     # the target is gone or unreadable: stop


cdef struct IseqEnt:
    uint64_t addr        # its address: the key in the intern table (first, as sdb_intern_find_u64 wants)
    uint64_t encoded
    uint64_t size        # in VALUEs
    uint32_t locals      # local_table_size: a method frame's env sits at its caller's sp + locals + 3
    uint32_t type        # ISEQ_TYPE_*, when the row has local_table_size (else TYPE_UNREAD)
    uint64_t read_ns     # the copy window (job.lo_ns) of the sample whose check last read it
    uint64_t local_iseq  # body.local_iseq: itself for a method, its method's for a block (0: not read)

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

cdef enum:
    INNER_NOT_ISEQ = 1        # TypeEnt.inner of an entry of any kind but an ISeq method (no ISeq is at address 1)

cdef struct TypeEnt:        # a method entry seen in a frame (first sight read, then kept)
    uint64_t addr           # the value: the key in the intern table (first, as sdb_intern_find_u64 wants)
    uint64_t inner          # the ISeq of its definition (an ISeq method), else INNER_NOT_ISEQ, once def_read
    uint32_t type           # IMEMO_* (imemo_ment: the only kind kept)
    uint32_t def_read       # 1: inner is read (inner 0 then: an ISeq method whose definition holds no ISeq)

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
    uint32_t ctx            # 1: its ec header, frames and window are an in-context read's (take_ctx)
    void *ctx_slot          #   that read's slot (sdb_ctx_slot), and its seq when taken
    uint64_t ctx_seq
    uint32_t ctx_gc_ok      #   that read's GC words were read (ctxslot.h)
    uint32_t ctx_gc_word
    uint64_t ctx_running_ec

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
    uint64_t last_ns        # its last sample's time (an in-context read is taken only if newer)
    uint64_t last_span      # the slot's span when its last sample was taken (take_ctx)
