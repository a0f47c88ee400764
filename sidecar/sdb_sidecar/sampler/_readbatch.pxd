# Batched reads from the target (native/readbatch.h).
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from posix.types cimport pid_t

cdef extern from "readbatch.h" nogil:
    enum:
        SDB_BATCH_IOV
        SDB_BASE_ABS
    ctypedef void (*sdb_read_tap)(void *ctx, uint64_t addr, uint64_t length) noexcept nogil
    ctypedef struct sdb_batch:
        uint64_t n
        uint8_t *bases[4]
        sdb_read_tap tap
        void *tap_ctx
    int sdb_batch_init(sdb_batch *b)
    void sdb_batch_free(sdb_batch *b)
    int sdb_batch_add(sdb_batch *b, uint64_t addr, uint64_t length, uint32_t base, uint64_t off,
                      int *result, int fail, uint32_t *done)
    int sdb_batch_run(sdb_batch *b, pid_t pid)
    ssize_t sdb_read_remote(pid_t pid, uint64_t addr, void *dst, size_t n)
    ssize_t sdb_batch_read1(const sdb_batch *b, pid_t pid, uint64_t addr, void *dst, size_t n)
