# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Thread states and idle reuse, the sampler's fourth layer (Reads -> MethodEntries -> Walk ->
States -> Sampler): which threads need no read this tick. Ruby >= 3.2: the gem's state word
(still_idle). Ruby 3.1: the kernel, through procfs or the kernel view (native/tstate.c: still_asleep, note_asleep,
kv_confirm). docs/internals.md, "Thread states"."""
from sdb_sidecar.sampler._tstate cimport (sdb_kernel_state, sdb_switch_ins, sdb_kv_holds, sdb_kv_settle,
                                  SDB_KV_ON_CPU as KV_ON_CPU, SDB_KV_UNKNOWN as KV_UNKNOWN)


cdef class States(Walk):

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
