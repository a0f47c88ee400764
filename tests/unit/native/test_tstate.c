/* Thread states from the kernel (sidecar/sdb_sidecar/sampler/native/tstate.c) on their own: procfs text
 * parsed (a comm holding ") R (", short and empty reads), this process's own threads read through
 * /proc (a running one 'R', a sleeping one 'S' whose switch-in count stays while it sleeps), th->status
 * mapped, and the kernel view's registration and settling on a word array of the test's own. */
#define _GNU_SOURCE 1
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "sdb_registry.h"
#include "tstate.h"

static void stat_text_gives_the_letter_after_the_last_paren(void)
{
    const char *plain = "1234 (ruby) S 1 1234 1234 0 -1 4194560";
    const char *hostile = "77 (a) R (b) x) D 1 2 3";
    CHECK(sdb_stat_letter(plain, (ssize_t)strlen(plain)) == 'S');
    CHECK(sdb_stat_letter(hostile, (ssize_t)strlen(hostile)) == 'D');
    CHECK(sdb_stat_letter("1 (x)", 5) == 0);            /* cut before the letter */
    CHECK(sdb_stat_letter("no paren", 8) == 0);
    CHECK(sdb_stat_letter("", 0) == 0);
    CHECK(sdb_stat_letter("x", -1) == 0);
}

static void schedstat_text_gives_the_third_field(void)
{
    const char *t = "123456789 987654 4242\n";
    CHECK(sdb_schedstat_switch_ins(t, (ssize_t)strlen(t)) == 4242);
    CHECK(sdb_schedstat_switch_ins("1 2", 3) == 0);
    CHECK(sdb_schedstat_switch_ins("", 0) == 0);
}

static void status_values_map_to_states(void)
{
    /* the values a row gives (3.1's enum rb_thread_status), and others: only the row decides */
    const sdb_thread_statuses ruby = {0, 1, 2, 3}, other = {7, 5, 6, 4};
    CHECK(sdb_state_from_status(0, &ruby) == SDB_STATE_RUNNING);
    CHECK(sdb_state_from_status(1, &ruby) == SDB_STATE_BLOCKED);
    CHECK(sdb_state_from_status(2, &ruby) == SDB_STATE_BLOCKED);
    CHECK(sdb_state_from_status(3, &ruby) == SDB_STATE_ENDED);
    CHECK(sdb_state_from_status(9, &ruby) == SDB_STATE_UNKNOWN);
    CHECK(sdb_state_from_status(7, &other) == SDB_STATE_RUNNING);
    CHECK(sdb_state_from_status(5, &other) == SDB_STATE_BLOCKED);
    CHECK(sdb_state_from_status(4, &other) == SDB_STATE_ENDED);
    CHECK(sdb_state_from_status(0, &other) == SDB_STATE_UNKNOWN);
}

static volatile int sleeper_tid;
static void *sleeper(void *arg)
{
    (void)arg;
    __atomic_store_n(&sleeper_tid, (int)syscall(SYS_gettid), __ATOMIC_RELEASE);
    sleep(30);                          /* cancelled by main */
    return NULL;
}

static void this_process_threads_read_through_procfs(void)
{
    char task_dir[64];
    sdb_tstate me, other, none;
    pthread_t th;
    uint64_t n1, n2;
    struct timespec ms = {0, 1000000};
    int i, letter = 0;
    memset(&me, 0, sizeof me);
    memset(&other, 0, sizeof other);
    memset(&none, 0, sizeof none);
    snprintf(task_dir, sizeof task_dir, "/proc/%d/task", (int)getpid());
    CHECK(sdb_kernel_state(&me, task_dir, (uint32_t)syscall(SYS_gettid)) == 'R');
    CHECK(me.stat_fd > 0);              /* kept open for the next read */
    pthread_create(&th, NULL, sleeper, NULL);
    while (__atomic_load_n(&sleeper_tid, __ATOMIC_ACQUIRE) == 0)
        nanosleep(&ms, NULL);
    for (i = 0; i < 2000 && letter != 'S'; i++) {   /* until it is in its sleep */
        letter = sdb_kernel_state(&other, task_dir, (uint32_t)sleeper_tid);
        nanosleep(&ms, NULL);
    }
    CHECK(letter == 'S');
    n1 = sdb_switch_ins(&other, task_dir, (uint32_t)sleeper_tid);
    nanosleep(&ms, NULL);
    n2 = sdb_switch_ins(&other, task_dir, (uint32_t)sleeper_tid);
    CHECK(n1 != 0 && n1 == n2);         /* asleep: not switched in since */
    {   /* its unknown kernel-view word settles to "off CPU": asleep, count unchanged around the letter */
        uint64_t words[8] = {0};
        sdb_kview kv = {words, 7};
        uint64_t unknown = ((uint64_t)sleeper_tid << 32) | (3 << 2) | SDB_KV_UNKNOWN;
        words[sleeper_tid & 7] = unknown;
        CHECK(sdb_kv_settle(&kv, &other, task_dir, (uint32_t)sleeper_tid, unknown, 5000000000ull)
              == ((uint64_t)sleeper_tid << 32 | (3 << 2)));
        /* a word the program changed meanwhile is left as the program wrote it */
        other.kv_probe_ns = 0;
        words[sleeper_tid & 7] = unknown | SDB_KV_ON_CPU;
        CHECK(sdb_kv_settle(&kv, &other, task_dir, (uint32_t)sleeper_tid, unknown, 5000000000ull)
              == (unknown | SDB_KV_ON_CPU));
    }
    /* no task directory, or no such thread: unknown, and never tried again */
    CHECK(sdb_kernel_state(&none, "", 1) == 0 && none.stat_fd == -1);
    memset(&none, 0, sizeof none);
    CHECK(sdb_kernel_state(&none, task_dir, 0x7ffffff0) == 0 && none.stat_fd == -1);
    sdb_tstate_close(&me);
    sdb_tstate_close(&other);
    CHECK(me.stat_fd == 0 && other.sched_fd == 0);
    pthread_cancel(th);
    pthread_join(th, NULL);
}

static void kernel_view_registers_a_thread_and_refuses_a_slot_another_holds(void)
{
    uint64_t words[8] = {0};
    sdb_kview kv = {words, 7};
    sdb_tstate ts[3];
    uint64_t w;
    memset(ts, 0, sizeof ts);
    /* tid 9: slot 1, registered now: unknown until its next switch */
    CHECK(sdb_kv_holds(&kv, &ts[0], 9, &w, ts, sizeof ts[0], 3) == 1);
    CHECK(w == ((9ull << 32) | SDB_KV_UNKNOWN) && words[1] == w && ts[0].kv_tid == 9);
    /* the program switched it out: the word it wrote is what the next look sees */
    words[1] = (9ull << 32) | (5 << 2);
    CHECK(sdb_kv_holds(&kv, &ts[0], 9, &w, ts, sizeof ts[0], 3) == 1 && w == words[1]);
    /* tid 17 hashes to slot 1 too, held by tid 9 of ours: procfs for it, from now on */
    CHECK(sdb_kv_holds(&kv, &ts[1], 17, &w, ts, sizeof ts[0], 3) == 0);
    CHECK(ts[1].kv_failed == 1 && words[1] == ((9ull << 32) | (5 << 2)));
    CHECK(sdb_kv_holds(&kv, &ts[1], 17, &w, ts, sizeof ts[0], 3) == 0);
    /* a slot left by a thread that is not ours is taken over */
    words[2] = 1234ull << 32;
    CHECK(sdb_kv_holds(&kv, &ts[2], 2 + 8 * 3, &w, ts, sizeof ts[0], 3) == 1 && (words[2] >> 32) == 26);
    /* no view: never */
    kv.words = NULL;
    memset(&ts[0], 0, sizeof ts[0]);
    CHECK(sdb_kv_holds(&kv, &ts[0], 9, &w, ts, sizeof ts[0], 3) == 0);
}

static void an_unknown_word_settles_only_for_a_thread_asleep(void)
{
    char task_dir[64];
    uint64_t words[8] = {0};
    sdb_kview kv = {words, 7};
    sdb_tstate t;
    uint32_t tid = (uint32_t)syscall(SYS_gettid);
    uint64_t unknown = ((uint64_t)tid << 32) | SDB_KV_UNKNOWN;
    memset(&t, 0, sizeof t);
    snprintf(task_dir, sizeof task_dir, "/proc/%d/task", (int)getpid());
    words[tid & 7] = unknown;
    /* this thread is running ('R'): the word stays unknown */
    CHECK(sdb_kv_settle(&kv, &t, task_dir, tid, unknown, 1000000000ull) == unknown);
    CHECK(t.kv_probe_ns == 1000000000ull);
    /* asked again within SDB_KV_SETTLE_NS: procfs is not read, the word handed back as it was */
    CHECK(sdb_kv_settle(&kv, &t, task_dir, tid, 42, 1000000000ull + SDB_KV_SETTLE_NS - 1) == 42);
    sdb_tstate_close(&t);
}

int main(void)
{
    stat_text_gives_the_letter_after_the_last_paren();
    schedstat_text_gives_the_third_field();
    status_values_map_to_states();
    this_process_threads_read_through_procfs();
    kernel_view_registers_a_thread_and_refuses_a_slot_another_holds();
    an_unknown_word_settles_only_for_a_thread_asleep();
    return check_failures != 0;
}
