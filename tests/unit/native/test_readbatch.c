/* Batched reads (sidecar/sdb_sidecar/sampler/native/readbatch.c) on this process's own memory: every read
 * lands where it was told (an address, or a base set after queueing), a read that fails marks its
 * job and the batch goes on after it, more reads than one call takes are split, and a process
 * that is gone says so. */
#define _GNU_SOURCE 1
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "readbatch.h"

/* a page no read can copy from: mapped PROT_NONE for the whole run (an unmapped one could be
 * mapped again by a later allocation) */
static uint64_t unmapped_address(void)
{
    static void *guard;
    if (guard == NULL)
        guard = mmap(NULL, (size_t)sysconf(_SC_PAGESIZE), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return (uint64_t)(uintptr_t)guard;
}

static void reads_land_where_told_and_a_failure_marks_only_its_job(void)
{
    static const char src1[] = "first source bytes";
    static const uint64_t src2 = 0x1122334455667788ull;
    char abs_dst[sizeof src1] = {0};
    uint8_t *buf = calloc(64, 1);
    uint64_t word = 0;
    int results[4] = {0, 0, 0, 0};
    uint32_t done[4] = {0, 0, 0, 0};
    sdb_batch b;
    CHECK(sdb_batch_init(&b) == 0);
    CHECK(sdb_batch_add(&b, (uintptr_t)src1, sizeof src1, SDB_BASE_ABS, (uintptr_t)abs_dst, &results[0], 7, &done[0]) == 0);
    CHECK(sdb_batch_add(&b, unmapped_address(), 16, 1, 0, &results[1], 9, &done[1]) == 0);
    CHECK(sdb_batch_add(&b, (uintptr_t)&src2, 8, 1, 40, &results[2], 7, &done[2]) == 0);
    CHECK(sdb_batch_add(&b, (uintptr_t)&src2, 8, SDB_BASE_ABS, (uintptr_t)&word, &results[3], 0, NULL) == 0);
    b.bases[1] = buf;                   /* the base is read when the batch runs */
    CHECK(sdb_batch_run(&b, getpid()) == 0);
    CHECK(b.n == 0);
    CHECK(memcmp(abs_dst, src1, sizeof src1) == 0 && results[0] == 0 && done[0] == 1);
    CHECK(results[1] == 9 && done[1] == 0);
    CHECK(memcmp(buf + 40, &src2, 8) == 0 && results[2] == 0 && done[2] == 1);
    CHECK(word == src2 && results[3] == 0);
    sdb_batch_free(&b);
    free(buf);
}

static void a_failed_read_keeps_an_earlier_outcome_and_a_speculative_one_sets_none(void)
{
    int result = 3, spec = 0;
    sdb_batch b;
    uint8_t dst[8];
    CHECK(sdb_batch_init(&b) == 0);
    sdb_batch_add(&b, unmapped_address(), 8, SDB_BASE_ABS, (uintptr_t)dst, &result, 9, NULL);
    sdb_batch_add(&b, unmapped_address(), 8, SDB_BASE_ABS, (uintptr_t)dst, &spec, 0, NULL);
    CHECK(sdb_batch_run(&b, getpid()) == 0);
    CHECK(result == 3);
    CHECK(spec == 0);
    sdb_batch_free(&b);
}

static void more_reads_than_one_call_takes_are_all_read(void)
{
    enum { N = 3 * SDB_BATCH_IOV + 17 };
    uint64_t *src = malloc(N * sizeof(uint64_t)), *dst = calloc(N, sizeof(uint64_t));
    uint32_t done = 0;
    int result = 0, fails = 0, i;
    sdb_batch b;
    CHECK(sdb_batch_init(&b) == 0);
    for (i = 0; i < N; i++) {
        src[i] = 0xabc000000ull + (uint64_t)i;
        if (i == SDB_BATCH_IOV + 5) {   /* one failure in the second call */
            sdb_batch_add(&b, unmapped_address(), 8, 1, (uint64_t)i * 8, &fails, 1, NULL);
            continue;
        }
        sdb_batch_add(&b, (uintptr_t)&src[i], 8, 1, (uint64_t)i * 8, &result, 1, &done);
    }
    b.bases[1] = (uint8_t *)dst;
    CHECK(sdb_batch_run(&b, getpid()) == 0);
    CHECK(result == 0 && fails == 1 && done == N - 1);
    for (i = 0; i < N; i++)
        if (i != SDB_BATCH_IOV + 5 && dst[i] != src[i]) {
            CHECK(dst[i] == src[i]);
            break;
        }
    sdb_batch_free(&b);
    free(src);
    free(dst);
}

static void a_process_that_is_gone_stops_the_batch(void)
{
    pid_t child = fork();
    uint64_t v = 1, dst = 0;
    int result = 0;
    sdb_batch b;
    if (child == 0)
        _exit(0);
    waitpid(child, NULL, 0);            /* reaped: no such process now */
    CHECK(sdb_batch_init(&b) == 0);
    sdb_batch_add(&b, (uintptr_t)&v, 8, SDB_BASE_ABS, (uintptr_t)&dst, &result, 2, NULL);
    CHECK(sdb_batch_run(&b, child) == ESRCH);
    CHECK(b.n == 0 && dst == 0);
    sdb_batch_free(&b);
}

static void one_read_reads_now(void)
{
    static const uint64_t v = 42;
    uint64_t dst = 0;
    CHECK(sdb_read_remote(getpid(), (uintptr_t)&v, &dst, 8) == 8 && dst == 42);
    CHECK(sdb_read_remote(getpid(), unmapped_address(), &dst, 8) == -1 && errno == EFAULT);
}

struct taps { uint64_t addr[8], len[8]; int n; };
static void note(void *ctx, uint64_t addr, uint64_t length)
{
    struct taps *t = ctx;
    if (t->n < 8) {
        t->addr[t->n] = addr;
        t->len[t->n] = length;
    }
    t->n++;
}

static void the_tap_is_told_of_every_read_that_succeeded(void)
{
    static const uint64_t a = 1, c = 3;
    uint64_t dst[3];
    int result = 0;
    struct taps t = {{0}, {0}, 0};
    sdb_batch b;
    CHECK(sdb_batch_init(&b) == 0);
    b.tap = note;
    b.tap_ctx = &t;
    sdb_batch_add(&b, (uintptr_t)&a, 8, SDB_BASE_ABS, (uintptr_t)&dst[0], &result, 1, NULL);
    sdb_batch_add(&b, unmapped_address(), 8, SDB_BASE_ABS, (uintptr_t)&dst[1], &result, 0, NULL);
    sdb_batch_add(&b, (uintptr_t)&c, 8, SDB_BASE_ABS, (uintptr_t)&dst[2], &result, 1, NULL);
    CHECK(sdb_batch_run(&b, getpid()) == 0);
    CHECK(sdb_batch_read1(&b, getpid(), (uintptr_t)&c, &dst[0], 8) == 8);
    CHECK(sdb_batch_read1(&b, getpid(), unmapped_address(), &dst[0], 8) == -1);
    CHECK(t.n == 3);
    CHECK(t.addr[0] == (uintptr_t)&a && t.addr[1] == (uintptr_t)&c && t.addr[2] == (uintptr_t)&c);
    CHECK(t.len[0] == 8 && t.len[1] == 8 && t.len[2] == 8);
    sdb_batch_free(&b);
}

int main(void)
{
    the_tap_is_told_of_every_read_that_succeeded();
    reads_land_where_told_and_a_failure_marks_only_its_job();
    a_failed_read_keeps_an_earlier_outcome_and_a_speculative_one_sets_none();
    more_reads_than_one_call_takes_are_all_read();
    a_process_that_is_gone_stops_the_batch();
    one_read_reads_now();
    return check_failures != 0;
}
