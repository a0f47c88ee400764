/* The intern table (sidecar/sdb_sidecar/sampler/native/intern.c) on its own: ids in insertion order,
 * lookups through collisions and growth, clearing, keys compared through the caller's eq. */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "intern.h"

struct ent { uint64_t key; uint64_t value; };

static int ent_eq(const void *entry, const void *key, const void *ctx)
{
    (void)ctx;
    return ((const struct ent *)entry)->key == *(const uint64_t *)key;
}

static uint64_t mix(uint64_t x) { x ^= x >> 31; x *= 0x9e3779b97f4a7c15ull; return x ^ (x >> 29); }

static void ids_are_positions_and_survive_growth(void)
{
    sdb_intern t;
    struct ent e;
    uint64_t k;
    CHECK(sdb_intern_init(&t, sizeof e, 4) == 0);
    for (k = 1; k <= 10000; k++) {
        e.key = k * 4096;
        e.value = k;
        CHECK(sdb_intern_find(&t, mix(e.key), ent_eq, &e.key, NULL) == -1);
        CHECK(sdb_intern_insert(&t, mix(e.key), &e) == (int64_t)(k - 1));
    }
    CHECK(t.count == 10000);
    CHECK(t.index_cap >= 2 * t.count && (t.index_cap & (t.index_cap - 1)) == 0);
    for (k = 1; k <= 10000; k++) {
        uint64_t key = k * 4096;
        int64_t id = sdb_intern_find(&t, mix(key), ent_eq, &key, NULL);
        CHECK(id == (int64_t)(k - 1));
        CHECK(((struct ent *)sdb_intern_at(&t, (uint64_t)id))->value == k);
        CHECK(sdb_intern_find_u64(&t, mix(key), key) == sdb_intern_at(&t, (uint64_t)id));
    }
    k = 3;
    CHECK(sdb_intern_find(&t, mix(k), ent_eq, &k, NULL) == -1);
    CHECK(sdb_intern_find_u64(&t, mix(k), k) == NULL);
    sdb_intern_free(&t);
}

static void every_key_on_one_hash_is_still_told_apart(void)
{
    /* the same hash for all: every lookup probes past the others, across growths */
    sdb_intern t;
    struct ent e;
    uint64_t k;
    CHECK(sdb_intern_init(&t, sizeof e, 2) == 0);
    for (k = 1; k <= 300; k++) {
        e.key = k;
        e.value = k * 7;
        CHECK(sdb_intern_insert(&t, 0xabcdef, &e) == (int64_t)(k - 1));
    }
    for (k = 1; k <= 300; k++) {
        struct ent *got = sdb_intern_find_u64(&t, 0xabcdef, k);
        CHECK(got != NULL && got->value == k * 7);
        CHECK(sdb_intern_find(&t, 0xabcdef, ent_eq, &k, NULL) == (int64_t)(k - 1));
    }
    k = 301;
    CHECK(sdb_intern_find(&t, 0xabcdef, ent_eq, &k, NULL) == -1);
    /* a different hash whose low bits land on the same chain: its stored hash tells it apart */
    CHECK(sdb_intern_find_u64(&t, 0x1abcdef, 1) == NULL);
    sdb_intern_free(&t);
}

struct key_with_ctx { const char *name; };
static int by_name(const void *entry, const void *key, const void *ctx)
{
    const char *names = ctx;
    return strcmp(names + ((const uint32_t *)entry)[0], ((const struct key_with_ctx *)key)->name) == 0;
}

static void eq_sees_the_callers_context(void)
{
    static const char names[] = "alpha\0beta\0gamma";
    uint32_t offs[] = {0, 6, 11};
    sdb_intern t;
    struct key_with_ctx q = {"beta"};
    int i;
    CHECK(sdb_intern_init(&t, sizeof(uint32_t), 8) == 0);
    for (i = 0; i < 3; i++)
        CHECK(sdb_intern_insert(&t, 42, &offs[i]) == i);
    CHECK(sdb_intern_find(&t, 42, by_name, &q, names) == 1);
    q.name = "delta";
    CHECK(sdb_intern_find(&t, 42, by_name, &q, names) == -1);
    sdb_intern_free(&t);
}

static void clear_starts_ids_over_and_keeps_the_memory(void)
{
    sdb_intern t;
    struct ent e = {77, 1};
    uint64_t cap;
    CHECK(sdb_intern_init(&t, sizeof e, 4) == 0);
    for (e.key = 1; e.key < 100; e.key++)
        sdb_intern_insert(&t, mix(e.key), &e);
    cap = t.index_cap;
    sdb_intern_clear(&t);
    CHECK(t.count == 0 && t.index_cap == cap);
    CHECK(sdb_intern_find_u64(&t, mix(5), 5) == NULL);
    e.key = 5;
    CHECK(sdb_intern_insert(&t, mix(5), &e) == 0);
    CHECK(sdb_intern_find_u64(&t, mix(5), 5) != NULL);
    sdb_intern_free(&t);
}

static void a_capacity_not_a_power_of_two_is_refused(void)
{
    sdb_intern t;
    CHECK(sdb_intern_init(&t, 8, 12) == -1);
    CHECK(sdb_intern_init(&t, 8, 1) == -1);
}

int main(void)
{
    ids_are_positions_and_survive_growth();
    every_key_on_one_hash_is_still_told_apart();
    eq_sees_the_callers_context();
    clear_starts_ids_over_and_keeps_the_memory();
    a_capacity_not_a_power_of_two_is_refused();
    return check_failures != 0;
}
