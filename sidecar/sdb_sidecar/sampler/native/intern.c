/* The intern table (intern.h). */
#include "intern.h"

#include <stdlib.h>
#include <string.h>

#define SLOT_TAG(s) ((uint32_t)((s) >> 32))
#define SLOT_ID(s) ((uint64_t)(uint32_t)(s) - 1)

int sdb_intern_init(sdb_intern *t, size_t esize, uint64_t index_cap)
{
    memset(t, 0, sizeof *t);
    if (index_cap < 2 || (index_cap & (index_cap - 1)))
        return -1;
    t->index = calloc(index_cap, sizeof(uint64_t));
    if (t->index == NULL)
        return -1;
    t->esize = esize;
    t->index_cap = index_cap;
    return 0;
}

void sdb_intern_free(sdb_intern *t)
{
    free(t->ents);
    free(t->index);
    memset(t, 0, sizeof *t);
}

void sdb_intern_clear(sdb_intern *t)
{
    if (t->index != NULL)
        memset(t->index, 0, t->index_cap * sizeof(uint64_t));
    t->count = 0;
}

int64_t sdb_intern_find(const sdb_intern *t, uint64_t hash, sdb_intern_eq eq, const void *key, const void *ctx)
{
    uint64_t mask = t->index_cap - 1, i = (uint32_t)hash & mask, s;
    while ((s = t->index[i]) != 0) {
        if (SLOT_TAG(s) == (uint32_t)hash && eq(sdb_intern_at(t, SLOT_ID(s)), key, ctx))
            return (int64_t)SLOT_ID(s);
        i = (i + 1) & mask;
    }
    return -1;
}

void *sdb_intern_find_u64(const sdb_intern *t, uint64_t hash, uint64_t key)
{
    uint64_t mask = t->index_cap - 1, i = (uint32_t)hash & mask, s;
    void *e;
    while ((s = t->index[i]) != 0) {
        if (SLOT_TAG(s) == (uint32_t)hash) {
            e = sdb_intern_at(t, SLOT_ID(s));
            if (*(const uint64_t *)e == key)
                return e;
        }
        i = (i + 1) & mask;
    }
    return NULL;
}

static void place(uint64_t *index, uint64_t mask, uint64_t slot)
{
    uint64_t i = SLOT_TAG(slot) & mask;
    while (index[i] != 0)
        i = (i + 1) & mask;
    index[i] = slot;
}

int64_t sdb_intern_insert(sdb_intern *t, uint64_t hash, const void *entry)
{
    uint64_t id = t->count, j, cap;
    uint64_t *idx;
    uint8_t *ents;
    if (id >= 0xffffffffull)
        return -1;                          /* ids are 32-bit in the index */
    if ((t->count + 1) * 2 > t->index_cap) {
        idx = calloc(t->index_cap * 2, sizeof(uint64_t));
        if (idx == NULL)
            return -1;                      /* the old index stays whole */
        for (j = 0; j < t->index_cap; j++)
            if (t->index[j] != 0)
                place(idx, t->index_cap * 2 - 1, t->index[j]);
        free(t->index);
        t->index = idx;
        t->index_cap *= 2;
    }
    if (id + 1 > t->ent_cap) {
        cap = t->ent_cap ? t->ent_cap * 2 : 256;
        ents = realloc(t->ents, cap * t->esize);
        if (ents == NULL)
            return -1;
        t->ents = ents;
        t->ent_cap = cap;
    }
    memcpy(sdb_intern_at(t, id), entry, t->esize);
    place(t->index, t->index_cap - 1, ((uint64_t)(uint32_t)hash << 32) | (id + 1));
    t->count++;
    return (int64_t)id;
}
