# The gem's registry (gem/ext/sdb/sdb_registry.h, shared with the gem), and its reader. The header's
# structs and constants are declared in _registry_h.pxd, generated from it (scripts/gen-layouts).
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy
from sdb_sidecar.sampler._util cimport sdb_load_acquire_u64, sdb_fence_acquire
from sdb_sidecar.sampler._registry_h cimport (sdb_layout, sdb_slot, sdb_span_event, sdb_header, SDB_NAME_MAX,
                                      SDB_STATUS_ENABLED, SDB_SPAN_BEGIN, SDB_TRACE_SPAN_AT,
                                      SDB_TRACE_SPAN_LEN, SDB_SERVICE_MAX)

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


cdef object layout_problem(const sdb_layout *L)


cdef inline int copy_slot(const sdb_slot *s, sdb_slot *out, uint64_t *gen, int tries) noexcept nogil:
    """A consistent copy of slot s under its seqlock (gen even, and the same after the copy), its gen
    in *gen: 1; 0 when every one of `tries` attempts met a write."""
    cdef uint64_t g1
    cdef int t
    for t in range(tries):
        g1 = sdb_load_acquire_u64(&s.gen)
        if g1 & 1:
            continue
        memcpy(out, <const void *>s, sizeof(sdb_slot))
        sdb_fence_acquire()
        if sdb_load_acquire_u64(&s.gen) == g1:
            gen[0] = g1
            return 1
    return 0
