# Thread states and idle reuse: a thread that ran no Ruby since its last read is sampled with that
# read's stack (docs/internals.md, "Thread states").
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int64_t
from sdb_sidecar.sampler._util cimport *
from sdb_sidecar.sampler._types cimport *
from sdb_sidecar.sampler._registry cimport Registry, sdb_layout, sdb_slot, sdb_header
from sdb_sidecar.sampler._tstate cimport sdb_kview
from sdb_sidecar.sampler._walk cimport Walk


cdef class States(Walk):
    cdef sdb_kview kv                   # 3.1: the kernel view (kview.py), words NULL without it
    cdef readonly uint64_t reused       # samples whose stack needed no read (idle since)

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

    cdef int still_asleep(self, Job *job) noexcept nogil
    cdef void note_asleep(self, Job *job) noexcept nogil
    cdef int kv_confirm(self, uint32_t n, uint64_t now) noexcept nogil
