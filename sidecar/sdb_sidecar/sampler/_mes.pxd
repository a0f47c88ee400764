# Each Ruby frame's method entry, from the env words read (docs/internals.md, "Untrusted memory").
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from sdb_sidecar.sampler._util cimport *
from sdb_sidecar.sampler._types cimport *
from sdb_sidecar.sampler._registry cimport Registry
from sdb_sidecar.sampler._intern cimport sdb_intern, sdb_intern_find_u64
from sdb_sidecar.sampler._reads cimport Reads


cdef class MethodEntries(Reads):
    cdef sdb_intern types               # TypeEnt: method entries seen in frames (first sight: one read)

    cdef uint32_t value_type(self, uint64_t v, uint64_t *inner) noexcept nogil
    cdef inline uint64_t check_me(self, uint64_t v, int can_be_svar) noexcept nogil:
        """Ruby's check_method_entry: v if it is a method entry, the svar's one, else 0."""
        cdef uint64_t inner, unused
        cdef uint32_t t = self.value_type(v, &inner)
        if t == self.L.imemo_ment:
            return v
        # (the inner value's own out-parameter is another variable: value_type zeroes it first)
        if t == self.L.imemo_svar and can_be_svar and self.value_type(inner, &unused) == self.L.imemo_ment:
            return inner
        return 0

    cdef uint64_t me_def_iseq(self, uint64_t me, int again=*) noexcept nogil
    cdef uint64_t env_me(self, const Job *job, const uint64_t *epd) noexcept nogil
    cdef void find_mes(self, Job *job) noexcept nogil
