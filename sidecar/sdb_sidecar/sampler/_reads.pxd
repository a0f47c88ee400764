# Reading the stacks of a tick: phases 1-3 (docs/internals.md, "Reading the stacks of a tick").
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int64_t
from posix.types cimport pid_t
from sdb_sidecar.sampler._util cimport *
from sdb_sidecar.sampler._types cimport *
from sdb_sidecar.sampler._registry cimport Registry, sdb_layout, sdb_slot, sdb_header
from sdb_sidecar.sampler._readbatch cimport sdb_batch, sdb_batch_add, sdb_batch_read1, SDB_BASE_ABS


cdef extern from "ctxslot.h" nogil:
    # one thread's in-context read (bpf/ctxslot.h, incontext.py): written by bpf/stack_in_context.c
    cdef struct sdb_ctx_slot:
        uint64_t reg_tid
        uint64_t reg_th
        uint64_t seq
        uint64_t tid
        uint64_t t_ns
        uint64_t ec
        uint64_t nbytes
        uint64_t win_lo
        uint64_t win_len
        uint64_t gc_ok
        uint64_t gc_word
        uint64_t running_ec
        uint8_t hdr[64]
        uint8_t frames[1]
        uint8_t win[1]
    enum:
        SDB_CTX_HDR_BYTES
        SDB_CTX_FRAME_BYTES
        SDB_CTX_WIN_BYTES


cdef struct Tapped:
    uint64_t *v
    uint64_t len, cap


cdef class Reads:
    cdef Registry reg
    cdef pid_t pid
    cdef char task_dir[256]             # where the target's threads are in procfs, by the registry's tids
    cdef sdb_layout L                   # the sampler's own copy of the layout, checked (layout_problem)
    cdef uint32_t max_depth
    cdef uint32_t env_below              # bytes below ep where a frame's env words start (the row's deepest)
    cdef uint32_t env_me_at, env_prev_at, env_flags_at   # ... and each word's index among them
    cdef readonly int fatal_errno       # errno that stopped the loop (ESRCH: target exited)
    cdef uint32_t gc_flags_word          # 3.1: objspace->flags and running_ec as read with the
    cdef uint64_t running_ec_word        #   stacks of this read_jobs call (gem: sdb_find_gc_words)
    cdef uint32_t gc_words_read          #   how many of the two reads succeeded
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
    cdef RawFrame *raw
    cdef uint64_t raw_cap
    cdef uint8_t *eparena
    cdef uint64_t ep_cap
    cdef Cluster *clusters
    cdef uint64_t cluster_cap
    cdef readonly uint64_t spec_hits     # threads whose frames phase 1 read speculatively (no phase 2)
    cdef readonly uint64_t phase3_skips  # reads that phase 1 completed (frames, ep words, cfp again)
    cdef Tapped tapped                   # record_reads: (address, length) of every read since
    cdef sdb_ctx_slot *ctx               # the in-context reads (incontext.py), NULL without them
    cdef uint32_t ctx_mask               #   slot = tid & ctx_mask
    cdef readonly uint64_t ctx_samples   # samples whose frames were read in context
    cdef uint32_t zjit_state             # ZJIT's lightweight frames (4.1+): 0 not known yet, 1 ZJIT on, 2 off for good
    cdef readonly uint64_t zjit_frames   # frames named by their ZJIT JIT frame record
    cdef readonly uint64_t zjit_unread   # ZJIT frames whose record could not be read (their read dropped, torn)

    cdef inline ssize_t read1(self, uint64_t addr, void *dst, size_t n) noexcept nogil:
        return sdb_batch_read1(&self.batch, self.pid, addr, dst, n)

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

    cdef int run_reqs(self) noexcept nogil
    cdef int zjit_frame(self, RawFrame *r, uint64_t jr) noexcept nogil
    cdef int take_ctx(self, Job *job) noexcept nogil
    cdef int copy_ctx(self, Job *job) noexcept nogil
    cdef void drop_ctx(self, Job *job, uint64_t lo_ns) noexcept nogil
    cdef int read_jobs(self, uint32_t first, uint32_t n) noexcept nogil
    cdef uint32_t state_from_status(self, Job *job) noexcept nogil
