# The left-right map's C view, for modules that read it without the GIL (the sampler's loop).
from libc.stdint cimport uint64_t

cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_mutex_t:
        pass
    ctypedef unsigned long pthread_t

cdef struct Table:           # open addressing; key 0 is "empty"
    uint64_t *keys
    uint64_t *vals
    uint64_t cap             # a power of two
    uint64_t count

cdef struct LR:
    Table tables[2]
    long left_or_right           # which copy readers read
    long version_index           # which read indicator readers arrive on
    long readers[2]              # read indicators
    pthread_mutex_t writer
    uint64_t writes
    uint64_t waits

cdef class LeftRightMap:
    cdef LR *m

# Wait-free read (no lock, no GIL). 1 if k is in the map (its value in v).
cdef int lr_get(LR *m, uint64_t k, uint64_t *v) noexcept nogil
