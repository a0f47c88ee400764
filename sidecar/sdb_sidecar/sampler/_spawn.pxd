# The sampler's thread (_spawn.pyx): Sampler.start's seam.
cdef extern from "<pthread.h>" nogil:
    ctypedef unsigned long pthread_t

ctypedef void *(*sdb_thread_fn)(void *) noexcept nogil

cdef int sdb_start_thread(pthread_t *thread, bint realtime, sdb_thread_fn fn, void *arg) noexcept nogil
