/* One open-addressing intern table, used by the sampler five times (ISeqs, frames, stacks, method
 * entries, cref_or_me types).
 *
 * Entries are fixed-size records kept in insertion order: an entry's id is its position, so ids
 * are dense, stable and handed to the trace as they are (frame and stack ids). The index is a
 * power-of-two array of 64-bit slots: the low 32 bits of the entry's hash above, id + 1 below
 * (0: empty). A probe compares the stored hash bits first and asks `eq` only on a match; growing
 * (at half full) re-places every slot from its stored hash bits, without the keys.
 * Nothing here allocates except sdb_intern_init and sdb_intern_insert; all of it is nogil-safe. */
#ifndef SDB_INTERN_H
#define SDB_INTERN_H 1

#include <stddef.h>
#include <stdint.h>

/* 1 when `entry` holds `key` (ctx: whatever the caller's keys need, e.g. an arena) */
typedef int (*sdb_intern_eq)(const void *entry, const void *key, const void *ctx);

typedef struct sdb_intern {
    uint8_t *ents;          /* count entries of esize bytes, id = position */
    uint64_t *index;        /* index_cap slots: (uint32 hash) << 32 | (id + 1); 0 empty */
    size_t esize;
    uint64_t count;
    uint64_t ent_cap;
    uint64_t index_cap;     /* a power of two, at least twice count */
} sdb_intern;

/* An empty table of esize-byte entries with index_cap slots (a power of two). 0, or -1: no memory. */
int sdb_intern_init(sdb_intern *t, size_t esize, uint64_t index_cap);
void sdb_intern_free(sdb_intern *t);
/* Every entry gone (the memory kept): ids start from 0 again. */
void sdb_intern_clear(sdb_intern *t);
/* The id of the entry with this hash that eq says holds key; -1: none. */
int64_t sdb_intern_find(const sdb_intern *t, uint64_t hash, sdb_intern_eq eq, const void *key, const void *ctx);
/* For tables whose entries begin with a uint64_t key (an address; 0 is never one): that entry, or NULL. */
void *sdb_intern_find_u64(const sdb_intern *t, uint64_t hash, uint64_t key);
/* Appends a copy of entry (not in the table: find first) under hash; grows the index at half full.
 * Its id, or -1 when memory ran out (the table is then unchanged). */
int64_t sdb_intern_insert(sdb_intern *t, uint64_t hash, const void *entry);

static inline void *sdb_intern_at(const sdb_intern *t, uint64_t id) { return t->ents + id * t->esize; }

#endif
