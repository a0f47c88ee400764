# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Reading the stacks of a tick, the first of the sampler's layers (Reads -> MethodEntries ->
Walk -> States -> Sampler): every thread of the tick in the same few process_vm_readv calls (native/readbatch.c),
phases 1-3 (docs/internals.md, "Reading the stacks of a tick"); the bytes are checked and named by
the next layers (_mes.pyx, _walk.pyx). Its __cinit__ takes the Sampler's arguments (Cython passes them to every
layer): the registry checked, the layout copied and checked, the per-slot caches."""
from libc.stdlib cimport calloc, free
from libc.string cimport memcpy
from libc.stdio cimport snprintf
from sdb_sidecar.sampler._readbatch cimport sdb_batch_init, sdb_batch_free, sdb_batch_run
from sdb_sidecar.sampler._tstate cimport (sdb_kernel_state, sdb_state_from_status, sdb_thread_statuses, sdb_tstate_close,
                                  SDB_KV_ON_CPU as KV_ON_CPU, SDB_KV_UNKNOWN as KV_UNKNOWN)
from sdb_sidecar.sampler._registry cimport layout_problem
from sdb_sidecar.sampler._registry import RegistryError


cdef void tap_read(void *ctx, uint64_t addr, uint64_t length) noexcept nogil:
    cdef Tapped *t = <Tapped *>ctx
    if grow(<void **>&t.v, &t.cap, t.len + 2, sizeof(uint64_t)) == 0:
        t.v[t.len] = addr
        t.v[t.len + 1] = length
        t.len += 2


cdef class Reads:
    def __cinit__(self, Registry reg, int pid, double rate_hz=1000.0, int max_depth=2048):
        reg.check()                     # raises RegistryError: sizes checked once
        self.reg = reg
        self.pid = pid
        snprintf(self.task_dir, sizeof(self.task_dir), "/proc/%d/task", <int>pid)
        self.L = reg.hdr.layout         # the sampler's own copy, checked here
        why = layout_problem(&self.L)
        if why is not None:
            raise RegistryError(f"{reg.path}: the layout is not one this sidecar can read ({why})")
        self.max_depth = max_depth
        self.env_below = 8 * max(self.L.env_me_cref, self.L.env_specval, self.L.env_flags)
        self.env_me_at = self.env_below // 8 - self.L.env_me_cref
        self.env_prev_at = self.env_below // 8 - self.L.env_specval
        self.env_flags_at = self.env_below // 8 - self.L.env_flags
        self.nslots = reg.slot_count
        self.th_lo = 0
        self.th_len = 0
        if self.L.thread_status != LAYOUT_NA and self.L.thread_status_mask != LAYOUT_NA and self.L.thread_status_shift < 8:
            self.th_lo = min(self.L.thread_ec, self.L.thread_status)
            self.th_len = max(self.L.thread_ec + 8, self.L.thread_status + 1) - self.th_lo
            if self.th_len > 128:
                self.th_len = 0
        self.cache = <SlotCache *>calloc(self.nslots + 1, sizeof(SlotCache))
        if self.cache == NULL or sdb_batch_init(&self.batch) != 0:
            raise MemoryError()

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
        free(self.tapped.v)

    def record_reads(self, bint on):
        """For tests: note the address and length of every read that succeeds from now on (off: stop,
        and forget them). tests/support/memimage.py saves a memory image of what a tick read."""
        self.tapped.len = 0
        self.batch.tap = NULL
        self.batch.tap_ctx = NULL
        if on:
            self.batch.tap = tap_read
            self.batch.tap_ctx = &self.tapped

    def recorded_reads(self):
        """[(address, length)] of the reads noted since record_reads(True), in order."""
        return [(self.tapped.v[i], self.tapped.v[i + 1]) for i in range(0, self.tapped.len, 2)]

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
        """Phases 1-3 for jobs[first:first+n] (the method entries, 3b, are the walk's:
        Walk.read_and_walk). -1: the target is gone."""
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
            if self.take_ctx(job):
                # its header, frames and window come from its in-context read (copy_ctx): only the
                # read above is made, to see the thread is still on that read's ec
                job.spec_off = spec_total
                spec_total += job.spec_len
                job.win_off = win_total
                win_total += job.win_hi - job.win_lo
                continue
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
        for j in range(first, first + n):
            job = &self.jobs[j]
            if job.ctx and not self.copy_ctx(job):
                self.drop_ctx(job, lo_ns)   # rewritten while copied: read from outside, as any
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
            elif job.ec != self.cache[job.slot].ec or not job.hdr_ok or (job.ctx and job.state != STATE_RUNNING):
                # what phase 1 read was another ec's (or its header failed); or an in-context read
                # of a thread th->status now says is not running (Ruby 3.1: take_ctx)
                job.spec_ok = 0
                job.win_ok = 0
                if job.ctx:                 # of another ec (a fiber switched since), or not running
                    self.drop_ctx(job, lo_ns)
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
                if job.ctx:                 # an in-context read that lacks them (take_ctx takes only
                    self.drop_ctx(job, lo_ns)   # whole stacks: this is a guard)
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
            if not self.jobs[j].ctx:
                self.jobs[j].read_ns = read_ns
        # 3. ep words of the frames without ISeq+pc, in merged spans; then ec->cfp again
        for j in range(first, first + n):
            job = &self.jobs[j]
            if job.result != R_OK:
                continue
            base = self.rawbuf + job.raw_off
            # every frame's ISeq and pc: its control frame's, or under ZJIT's lightweight frames (4.1+)
            # its JIT frame record's (zjit_frame)
            for f in range(job.nf):
                r = &self.raw[job.frame0 + f]
                r.iseq = u64_at(base, f * self.L.cfp_size + self.L.cfp_iseq)
                r.pc = u64_at(base, f * self.L.cfp_size + self.L.cfp_pc)
                if self.L.zjit_frame_slot != LAYOUT_NA and self.zjit_frame(
                        r, u64_at(base, f * self.L.cfp_size + self.L.cfp_jit_return)) != 0:
                    job.result = R_TORN
                    break
            if job.result != R_OK:
                continue
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
                r.ep = u64_at(base, f * self.L.cfp_size + self.L.cfp_ep)
                r.ep_off = NO_EP
                r.me = 0
                r.me_known = 0
                if r.ep < self.env_below:
                    continue
                if r.ep >= ADDR_MAX or (r.ep & 7):
                    job.result = R_TORN     # no Ruby env is there: a torn frame (the span arithmetic
                    break                   # below must never see such a value)
                if r.iseq != 0 and r.pc != 0 and memo != NULL and job.nf - 1 - f < c.nmemo \
                        and memo[job.nf - 1 - f].ep == r.ep and memo[job.nf - 1 - f].iseq == r.iseq \
                        and not (f + 1 < job.nf and self.raw[job.frame0 + f + 1].iseq == 0):
                    # the same ISeq on the same env at this depth as in the last read: the same
                    # method entry (no ep words needed; but above a frame without ISeq, maybe a C
                    # function's, finish_job needs this frame's flags)
                    r.me = memo[job.nf - 1 - f].me
                    r.me_known = 1
                    continue
                lo = r.ep - self.env_below
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
                    r.ep_off = cl.arena_off + (r.ep - self.env_below - cl.lo)
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
                if not job.ctx:             # an in-context read's frames did not move while read
                    self.add_req(job.ec + self.L.ec_cfp, 8, AREA_JOB_CFP2, 0, j, R_TORN)
            if self.batch.n and self.run_reqs() != 0:
                return -1
        else:
            self.phase3_skips += 1
        return 0

    cdef int zjit_frame(self, RawFrame *r, uint64_t jr) noexcept nogil:
        """A frame read on a Ruby with ZJIT's lightweight frames (4.1+), its jit_return `jr`. A frame
        ZJIT pushed writes no ISeq or pc into its control frame (they are an older frame's there):
        they are in its JIT frame record (zjit.h: CFP_ZJIT_FRAME, CFP_ISEQ, CFP_PC), found through
        jr: the row's zjit_return_c_frame for a C method's frame (no ISeq, no pc), else the record's
        address is the word zjit_frame_slot bytes below jr, on the thread's native stack. A frame
        with a jit_return is ZJIT's when ZJIT is on (rb_zjit_entry nonzero, the gem's
        zjit_entry_addr), else YJIT's (ZJIT is never turned off, nor on beside YJIT: zjit.rb
        `enable`): known from the first such frame on. 0: r holds the frame's ISeq and pc; 1: the
        record could not be read (the frame must not be named by its control frame's ISeq)."""
        cdef uint64_t rec = 0, on = 0
        cdef uint8_t rb[32]
        cdef uint32_t span
        if jr == 0:
            return 0                    # the interpreter's frame, or one ZJIT materialized
        if self.zjit_state == 0:
            if self.L.zjit_entry_addr == 0 or self.read1(self.L.zjit_entry_addr, &on, 8) != 8:
                self.zjit_unread += 1   # which JIT pushed it is not known
                return 1
            self.zjit_state = 1 if on != 0 else 2
        if self.zjit_state == 2:
            return 0                    # YJIT's frame: its control frame holds its ISeq
        if jr == self.L.zjit_return_c_frame:
            r.iseq = 0                  # zjit.c: rb_zjit_c_frame, no ISeq and no pc
            r.pc = 0
            return 0
        span = (self.L.zjit_frame_pc if self.L.zjit_frame_pc > self.L.zjit_frame_iseq else self.L.zjit_frame_iseq) + 8
        if span > sizeof(rb) or jr < self.L.zjit_frame_slot \
                or self.read1(jr - self.L.zjit_frame_slot, &rec, 8) != 8 or rec == 0 \
                or self.read1(rec, rb, span) != span:
            self.zjit_unread += 1
            return 1
        r.iseq = u64_at(rb, self.L.zjit_frame_iseq)
        r.pc = u64_at(rb, self.L.zjit_frame_pc)
        self.zjit_frames += 1
        return 0

    cdef int take_ctx(self, Job *job) noexcept nogil:
        """1 if job's thread has an in-context read (incontext.py) newer than its last sample, taken
        while it ran: the job's header, frames and window are that read's (copy_ctx copies them once
        the buffers are grown), its time the read's. A thread not yet asked for is asked for here."""
        cdef sdb_ctx_slot *s
        cdef uint64_t seq, cfp, end
        cdef SlotCache *c = &self.cache[job.slot]
        job.ctx = 0
        if self.ctx == NULL or job.tid == 0 or job.thread_addr == 0:
            return 0
        s = &self.ctx[job.tid & self.ctx_mask]
        if sdb_load_acquire_u64(&s.reg_tid) != job.tid or sdb_load_acquire_u64(&s.reg_th) != job.thread_addr:
            # ask for this thread (threads sharing a slot take it in turn: each tick asks anew)
            sdb_store_release_u64(&s.reg_tid, 0)
            sdb_store_release_u64(&s.reg_th, job.thread_addr)
            sdb_store_release_u64(&s.reg_tid, job.tid)
            return 0
        # the read is up to a tick older than the tick, whose state and span the sample takes: only
        # for a thread running now (Ruby 3.1: checked again once th->status is read, in 1b) whose
        # span is its last sample's (a span that began since may have begun after the read)
        if (job.state != STATE_RUNNING and job.state != STATE_UNKNOWN) or job.span0 != c.last_span:
            return 0
        seq = sdb_load_acquire_u64(&s.seq)
        # written now; another thread's (sharing the slot); a read that faulted; one this thread's
        # last sample is newer than (each read is taken once, in time order); one after the tick
        if (seq & 1) or s.tid != job.tid or s.nbytes == 0 or s.nbytes > SDB_CTX_FRAME_BYTES \
                or s.win_len > SDB_CTX_WIN_BYTES or s.t_ns <= c.last_ns or s.t_ns > self.tick_ns:
            return 0
        memcpy(job.hdr, s.hdr, EC_SPAN)
        cfp = u64_at(job.hdr, self.L.ec_cfp)
        end = u64_at(job.hdr, self.L.ec_vm_stack) + 8 * u64_at(job.hdr, self.L.ec_vm_stack_size)
        if end < cfp or end - cfp > s.nbytes:
            return 0                        # a stack deeper than the read holds: read from outside
        job.ctx = 1
        job.ctx_slot = <void *>s
        job.ctx_seq = seq
        job.ctx_gc_ok = <uint32_t>s.gc_ok          # (copy_ctx checks seq after these too)
        job.ctx_gc_word = <uint32_t>s.gc_word
        job.ctx_running_ec = s.running_ec
        job.hdr_ok = 1
        c.ec = s.ec                         # phase 1's ec word must be this one (1b)
        job.spec_lo = cfp
        job.spec_len = s.nbytes
        job.win_lo = s.win_lo
        job.win_hi = s.win_lo + s.win_len
        job.lo_ns = s.t_ns
        job.read_ns = s.t_ns
        return 1

    cdef int copy_ctx(self, Job *job) noexcept nogil:
        """The in-context read's frames and window into the tick's buffers. 0 when the program
        rewrote the slot meanwhile (then nothing of it may be used: drop_ctx)."""
        cdef sdb_ctx_slot *s = <sdb_ctx_slot *>job.ctx_slot
        memcpy(self.specbuf + job.spec_off, s.frames, job.spec_len)
        if job.win_hi > job.win_lo:
            memcpy(self.eparena + job.win_off, s.win, job.win_hi - job.win_lo)
        sdb_fence_acquire()
        if sdb_load_acquire_u64(&s.seq) != job.ctx_seq:
            return 0
        job.spec_ok = 1
        job.win_ok = job.win_hi > job.win_lo
        job.cfp2 = job.spec_lo
        job.cfp2_ok = 1
        return 1

    cdef void drop_ctx(self, Job *job, uint64_t lo_ns) noexcept nogil:
        """Nothing of job's in-context read is used: its header, frames and window are read from
        outside (1b reads the header again), and its time is the tick's."""
        job.ctx = 0
        job.hdr_ok = 0
        job.spec_ok = 0
        job.win_ok = 0
        job.cfp2_ok = 0
        job.lo_ns = lo_ns

    cdef uint32_t state_from_status(self, Job *job) noexcept nogil:
        """Ruby 3.1: the state th->status says (native/tstate.c); read_jobs asks the kernel which
        runnable thread waits for the GVL."""
        cdef sdb_thread_statuses v
        v.runnable = self.L.thread_runnable
        v.stopped = self.L.thread_stopped
        v.stopped_forever = self.L.thread_stopped_forever
        v.killed = self.L.thread_killed
        return sdb_state_from_status((job.th[self.L.thread_status - self.th_lo] >> self.L.thread_status_shift)
                                     & self.L.thread_status_mask, &v)

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
