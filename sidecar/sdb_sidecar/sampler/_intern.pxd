# The intern table (native/intern.h): one open-addressing table, used five times by the sampler.
from libc.stdint cimport uint8_t, uint64_t, int64_t

cdef extern from "intern.h" nogil:
    ctypedef int (*sdb_intern_eq)(const void *entry, const void *key, const void *ctx) noexcept nogil
    ctypedef struct sdb_intern:
        uint8_t *ents
        uint64_t *index
        size_t esize
        uint64_t count
        uint64_t ent_cap
        uint64_t index_cap
    int sdb_intern_init(sdb_intern *t, size_t esize, uint64_t index_cap)
    void sdb_intern_free(sdb_intern *t)
    void sdb_intern_clear(sdb_intern *t)
    int64_t sdb_intern_find(const sdb_intern *t, uint64_t hash, sdb_intern_eq eq, const void *key, const void *ctx)
    void *sdb_intern_find_u64(const sdb_intern *t, uint64_t hash, uint64_t key)
    int64_t sdb_intern_insert(sdb_intern *t, uint64_t hash, const void *entry)
    void *sdb_intern_at(const sdb_intern *t, uint64_t id)
