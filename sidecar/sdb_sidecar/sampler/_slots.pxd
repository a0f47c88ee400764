# The registry's slots, taken under their seqlocks into a tick's jobs; thread events.
from libc.stdint cimport uint32_t, uint64_t
from sdb_sidecar.sampler._util cimport *
from sdb_sidecar.sampler._types cimport *
from sdb_sidecar.sampler._registry cimport Registry, sdb_slot, copy_slot
from sdb_sidecar.sampler._states cimport States


cdef class Slots(States):
    cdef readonly uint64_t errors, threads_seen     # reads of threads gone; threads seen

    cdef void thread_event(self, const sdb_slot *copy, uint32_t ended, uint64_t serial, uint64_t now) noexcept nogil
    cdef int take_slot(self, uint32_t idx, uint64_t now, Job *job) noexcept nogil
    cdef void end_by_status(self, Job *job, uint64_t now) noexcept nogil
    cdef int settle(self, Job *job, uint64_t now) noexcept nogil
