# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The registry's slots, the sampler's fifth layer (Reads -> MethodEntries -> Walk -> States -> Slots
-> Sampler): each slot copied under its seqlock into a tick's job (take_slot), the thread events
its changes make (thread_event), and the ends of reads that neither succeeded nor tore (settle)."""
from libc.string cimport memcpy, memset
from sdb_sidecar.sampler._tstate cimport sdb_tstate_close


cdef class Slots(States):
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

    cdef int take_slot(self, uint32_t idx, uint64_t now, Job *job) noexcept nogil:
        """Copies slot idx under its seqlock into job; thread events on changes. 0: nothing to sample."""
        cdef const sdb_slot *s = <const sdb_slot *>(self.reg.base + self.reg.slots_offset
                                                    + <size_t>idx * self.reg.slot_size)
        cdef SlotCache *c = &self.cache[idx]
        cdef sdb_slot copy
        cdef uint64_t g1
        if not copy_slot(s, &copy, &g1, 2):
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

    cdef int settle(self, Job *job, uint64_t now) noexcept nogil:
        """A read that neither succeeded nor tore: a thread gone is counted as an error, one that
        ended (th->status) is ended; R_FATAL (the target is gone or unreadable) is returned."""
        if job.result == R_GONE:
            self.errors += 1
        elif job.result == R_ENDED:
            self.end_by_status(job, now)
        elif job.result == R_FATAL:
            return R_FATAL
        return R_OK
