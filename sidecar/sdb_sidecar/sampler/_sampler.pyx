# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The sampler: reads every registered thread's control frames from the
target with process_vm_readv, without Python's GIL.

One `Sampler` per target, built in layers, each a Cython module over small C units
(sidecar/sdb_sidecar/sampler/native/): `Reads` (_reads.pyx: phases 1-3, batched reads) -> `MethodEntries`
(_mes.pyx) -> `Walk` (_walk.pyx: checks, interning) -> `States` (_states.pyx: thread states, idle
reuse) -> `Slots` (_slots.pyx: each slot taken under its seqlock, thread events) -> `Sampler` (here:
the tick, the loop, the hand-over; the thread it runs in: _spawn.pyx; the samples record encoded by
native/encode.c). `Registry` is _registry.pyx's.

`start()` runs the tick loop in a native thread of its own (no GIL, from its first tick; `wait()`
joins it);
`drain()` hands what was gathered since the last drain to Python (new frames, new stacks, samples,
thread events, new ISeqs and method entries) under a short mutex. `read_memory()` is the one remote
read for Python code (symbols, snapshot).

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
from libc.string cimport memcpy, memset
from sdb_sidecar.sampler._util cimport *
from sdb_sidecar.sampler._types cimport *
from sdb_sidecar.sampler._registry cimport Registry, sdb_slot
from sdb_sidecar.sampler._encode cimport sdb_encode_samples, sdb_encode_samples_bound
from sdb_sidecar.sampler._intern cimport sdb_intern_clear, sdb_intern_at, sdb_intern_find_u64
from sdb_sidecar.sampler._slots cimport Slots
from sdb_sidecar.sampler._reads cimport sdb_ctx_slot
from sdb_sidecar.sampler._spawn cimport pthread_t, sdb_start_thread
from sdb_sidecar.sampler._spawn import prepare_thread   # the spare start() takes: recorder.py parks it
from cpython.ref cimport Py_INCREF, Py_DECREF
import os

cdef extern from "<pthread.h>" nogil:
    int pthread_join(pthread_t thread, void **ret)


cdef class Sampler(Slots):
    cdef uint64_t period_ns
    cdef uint64_t jitter_ns
    cdef uint64_t rng
    cdef pthread_mutex_t mu
    cdef int stop_flag
    cdef int wake_fd                     # eventfd of the drain loop (-1: none): see set_wake_fd
    cdef int wake_sent                   # signalled since the last drain
    cdef const uint64_t *pause_word      # eBPF's pause flag (watch_ebpf_pause), NULL: none
    cdef uint64_t pause_seen             # its value at the last tick
    cdef readonly uint64_t pauses_seen   # its changes seen at a tick: every ISeq named anew there
    # counters (read by stats())
    cdef readonly uint64_t late, missed, torn, retried
    cdef readonly uint64_t start_ns, last_tick_ns
    cdef readonly uint64_t read_ns_total   # time spent reading stacks (for the benchmark)
    # start()/wait(): the native thread that runs the loop
    cdef pthread_t loop_thread
    cdef int loop_state                  # 0: not started, 1: started, 2: joined
    cdef int loop_rc                     # what _loop returned (once the thread is over)
    cdef double loop_duration

    def __cinit__(self, Registry reg, int pid, double rate_hz=1000.0, int max_depth=2048):
        self.period_ns = <uint64_t>(1e9 / rate_hz)
        self.jitter_ns = self.period_ns // 20      # +-5% of a period
        self.rng = sdb_mix64(<uint64_t>pid ^ sdb_now_ns()) | 1
        self.wake_fd = -1
        pthread_mutex_init(&self.mu, NULL)

    def __dealloc__(self):
        pthread_mutex_destroy(&self.mu)

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

    def use_in_context(self, size_t address, uint32_t slots):
        """Take running threads' stacks from the in-context reads mapped at `address`
        (incontext.InContext: `slots` sdb_ctx_slot, a power of two), newer than their last sample,
        instead of copying them from outside while they run. Must stay mapped while this sampler
        runs. 0: back to reads from outside only."""
        if slots & (slots - 1):
            raise ValueError("the in-context slot count must be a power of two")
        with nogil:
            pthread_mutex_lock(&self.mu)
            self.ctx = <sdb_ctx_slot *>address
            self.ctx_mask = slots - 1 if address else 0
            pthread_mutex_unlock(&self.mu)

    def forget_iseqs(self):
        """Every ISeq is new again: the next sample that shows one hands it to the Drainer, which
        names it anew. Called when the eBPF creation probes stop or come back (a pause): an ISeq
        born unseen at a known address, with the same instruction buffer as the one before it,
        would otherwise pass for that one. Every thread's next sample is read whole and checked
        (no frame taken from its previous sample, no idle reuse), so each ISeq on it is named anew."""
        with nogil:
            pthread_mutex_lock(&self.mu)
            self.forget_iseqs_locked()
            pthread_mutex_unlock(&self.mu)

    cdef void forget_iseqs_locked(self) noexcept nogil:
        cdef uint32_t i
        sdb_intern_clear(&self.iseqs)
        for i in range(self.nslots + 1):
            self.cache[i].has_prev = 0

    def watch_ebpf_pause(self, size_t address):
        """Read eBPF's pause flag (the 64-bit word at `address`: non-zero from the moment the creation
        probes stop until they are attached again; ebpf.EbpfSymbolizer.pause_word) at every tick, and
        forget every ISeq (forget_iseqs) at the first tick that sees it change: a pause voids every
        name eBPF gave before its start, and the samples between its start and the moment the
        sidecar's Python threads notice it (200 ms beside a CPU hog) would otherwise keep those names
        and be shown (unknown). The word must stay mapped while this sampler runs. 0: none."""
        with nogil:
            pthread_mutex_lock(&self.mu)
            self.pause_word = <const uint64_t *>address
            self.pause_seen = sdb_load_acquire_u64(self.pause_word) if address else 0
            pthread_mutex_unlock(&self.mu)

    def forget_names(self, iseqs, mes):
        """These ISeqs and method entries (addresses) are new again: the next sample that shows one
        hands it to the Drainer, which reads it anew. For names a read could not give (the Drainer
        wrote them unnamed): a hot frame unnamed at its first sight would stay so for the rest of the
        recording. Every thread's next sample is read whole and checked, as after forget_iseqs."""
        cdef uint64_t addr
        cdef IseqEnt *e
        cdef uint64_t *m
        cdef uint32_t i
        cdef list iseq_list = [int(a) for a in iseqs]
        cdef list me_list = [int(a) for a in mes]
        with nogil:
            pthread_mutex_lock(&self.mu)
        try:
            for a in iseq_list:
                addr = a
                e = self.iseq_lookup(addr)
                if e != NULL:
                    e.encoded = 0       # no pc is inside it: check_iseq reads it and hands it over
                    e.size = 0
            for a in me_list:
                addr = a
                m = <uint64_t *>sdb_intern_find_u64(&self.mes, sdb_mix64(addr), addr)
                if m != NULL:
                    m[0] = 1            # no entry's address (they are aligned): note_me inserts it anew
            for i in range(self.nslots + 1):
                self.cache[i].has_prev = 0
        finally:
            pthread_mutex_unlock(&self.mu)

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
        if self.pause_word != NULL and sdb_load_acquire_u64(self.pause_word) != self.pause_seen:
            # eBPF's creation probes stopped or came back since the last tick: name every ISeq anew
            self.pause_seen = sdb_load_acquire_u64(self.pause_word)
            self.pauses_seen += 1
            self.forget_iseqs_locked()
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
        if n and self.read_and_walk(0, n) != 0:
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
                elif self.settle(&self.jobs[i], now) == R_FATAL:
                    rc = R_FATAL
            if ntorn and rc == R_OK:
                if self.read_and_walk(n, ntorn) != 0:
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
                        elif self.settle(&self.jobs[i], now) == R_FATAL:
                            rc = R_FATAL
        if rc == R_OK:
            self.ticks += 1
            self.last_tick_ns = now
        # something new to name (an ISeq, a frame's line, a method): read from the target while
        # it still holds, so wake the drain loop now rather than at its next regular drain; a
        # thread started or ended: the drain loop puts the in-context reads' timer on it, or off
        wake = self.wake_fd >= 0 and not self.wake_sent and (
            self.frames.count > self.frames_drained or self.g.new_iseq_len or self.g.new_me_len
            or (self.ctx != NULL and self.g.tevt_len))
        if wake:
            self.wake_sent = 1
        pthread_mutex_unlock(&self.mu)
        if wake:
            sdb_eventfd_signal(self.wake_fd)
        self.read_ns_total += sdb_now_ns() - t0
        return rc

    cdef int _loop(self, double duration_s) noexcept nogil:
        """The tick loop (start's thread): R_OK (stopped), -1 (duration_s passed) or R_FATAL."""
        cdef uint64_t start, deadline, limit, now, k, jitter
        cdef int rc = R_OK
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
        return rc

    cdef str _why(self, int rc):
        if rc == -1:
            return "duration"
        if rc == R_FATAL:
            return "target-exited" if self.fatal_errno == ESRCH else "permission"
        return "stopped"

    def start(self, double duration_s=0.0, bint realtime=False):
        """Ticks until stop() is called, duration_s passes (0: no limit) or the target goes away,
        in a native thread of its own, from now on. realtime: the thread is created SCHED_FIFO at
        the lowest real-time priority (session.realtime_sampling says why), under the normal
        scheduler when that is not allowed. So the first tick waits for nothing: not for the GIL,
        which a Python thread must take to begin and which another thread can hold for long (bcc's
        import held it through libbcc's dlopen: bpfload._load_libbcc), and not for a CPU, which a
        normal thread must be given first on a busy machine (50-190 ms beside two to eight `yes`:
        benchmarks/child_first_sample.py). Busy run 10 lost a new child's first ~0.7 s of samples
        to a Python sampler thread that asked for SCHED_FIFO only once it ran. The thread is the
        spare prepare_thread parked, when one waits (no thread to create: see there).
        wait() joins it and says why it ended: "stopped", "duration", "target-exited" or
        "permission"."""
        cdef int err = 0
        if self.loop_state != 0:
            raise RuntimeError("the sampler was started already")
        self.loop_duration = duration_s
        Py_INCREF(self)                 # the thread's reference, given back by wait()
        err = sdb_start_thread(&self.loop_thread, realtime, _sampler_thread, <void *>self)
        if err != 0:
            Py_DECREF(self)
            raise OSError(err, f"cannot start the sampler's thread: {os.strerror(err)}")
        self.loop_state = 1

    def wait(self):
        """Waits (without the GIL) until the thread start() began is over; why it ended."""
        if self.loop_state != 1:
            raise RuntimeError("the sampler was not started")
        with nogil:
            pthread_join(self.loop_thread, NULL)
        self.loop_state = 2
        Py_DECREF(self)
        return self._why(self.loop_rc)

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
        cdef uint64_t cut[16]
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
                cut[11] = self.gc_samples; cut[12] = self.ctx_samples; cut[13] = self.pauses_seen
                cut[14] = self.zjit_frames; cut[15] = self.zjit_unread
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
                                       "yjit_no_line", "span_unsure", "threads", "gc_samples", "in_context",
                                       "pauses_seen", "zjit_frames", "zjit_unread"),
                                      [cut[i] for i in range(16)]))
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
                "yjit_no_line": self.yjit_pcs, "span_unsure": self.span_unsure, "in_context": self.ctx_samples,
                "pauses_seen": self.pauses_seen, "zjit_frames": self.zjit_frames, "zjit_unread": self.zjit_unread,
                "start_ns": self.start_ns, "last_tick_ns": self.last_tick_ns,
                "read_ns_total": self.read_ns_total}


ctypedef void (*sdb_body_fn)(void *) noexcept nogil


cdef void _sampler_thread_body(Sampler s) noexcept nogil:
    s.loop_rc = s._loop(s.loop_duration)


cdef void *_sampler_thread(void *arg) noexcept nogil:
    """Sampler.start's thread: the loop, on the reference to the Sampler that start took for it
    (wait gives it back), with no GIL at any point: the body takes it as a borrowed argument."""
    (<sdb_body_fn><void *>_sampler_thread_body)(arg)
    return NULL


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


def ctx_slot_size():
    """sizeof(struct sdb_ctx_slot) (bpf/ctxslot.h): incontext.py maps that many bytes a slot."""
    return sizeof(sdb_ctx_slot)
