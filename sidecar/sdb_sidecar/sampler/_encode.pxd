# The samples record's encoder (native/encode.h).
from libc.stdint cimport uint8_t, uint32_t, uint64_t

cdef extern from "encode.h" nogil:
    ctypedef struct sdb_sample:
        uint64_t t_ns
        uint64_t serial
        uint64_t span
        uint64_t tick
        uint32_t stack
        uint32_t state
        uint32_t win_us
        uint32_t pad
    size_t sdb_encode_samples_bound(uint64_t n)
    size_t sdb_encode_samples(const sdb_sample *smp, uint64_t n, uint8_t *buf)
