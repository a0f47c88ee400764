/* Thread states from the kernel (tstate.h). */
#define _GNU_SOURCE 1
#include "tstate.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "sdb_registry.h"

int sdb_stat_letter(const char *buf, ssize_t n)
{
    ssize_t i;
    if (n <= 0)
        return 0;
    i = n - 1;
    while (i > 0 && buf[i] != ')')
        i--;
    return i > 0 && i + 2 < n ? buf[i + 2] : 0;
}

uint64_t sdb_schedstat_switch_ins(const char *buf, ssize_t n)
{
    uint64_t v = 0;
    int field = 0;
    for (ssize_t i = 0; i < n; i++) {
        if (buf[i] == ' ')
            field++;
        else if (field == 2 && buf[i] >= '0' && buf[i] <= '9')
            v = v * 10 + (uint64_t)(buf[i] - '0');
    }
    return v;
}

ssize_t sdb_task_file(int *fd, const char *task_dir, uint32_t tid, const char *name, char *buf, size_t cap)
{
    char path[320];
    if (*fd == 0) {
        if (task_dir[0] == 0) {
            *fd = -1;
            return 0;
        }
        snprintf(path, sizeof path, "%s/%u/%s", task_dir, tid, name);
        *fd = open(path, O_RDONLY | O_CLOEXEC) + 1;
        if (*fd <= 0)
            *fd = -1;                   /* never again for this thread */
    }
    if (*fd <= 0)
        return 0;
    return pread(*fd - 1, buf, cap - 1, 0);
}

int sdb_kernel_state(sdb_tstate *t, const char *task_dir, uint32_t tid)
{
    char buf[256];
    return sdb_stat_letter(buf, sdb_task_file(&t->stat_fd, task_dir, tid, "stat", buf, sizeof buf));
}

uint64_t sdb_switch_ins(sdb_tstate *t, const char *task_dir, uint32_t tid)
{
    char buf[128];
    ssize_t n = sdb_task_file(&t->sched_fd, task_dir, tid, "schedstat", buf, sizeof buf);
    return n > 0 ? sdb_schedstat_switch_ins(buf, n) : 0;
}

void sdb_tstate_close(sdb_tstate *t)
{
    if (t->stat_fd > 0)
        close(t->stat_fd - 1);
    if (t->sched_fd > 0)
        close(t->sched_fd - 1);
    t->stat_fd = 0;
    t->sched_fd = 0;
    t->kstate = 0;
    t->asleep = 0;
    t->was_idle = 0;
    t->kv_tid = 0;
    t->kv_failed = 0;
    t->kv_probe_ns = 0;
}

uint32_t sdb_state_from_status(uint32_t status, const sdb_thread_statuses *v)
{
    if (status == v->stopped || status == v->stopped_forever)
        return SDB_STATE_BLOCKED;
    if (status == v->killed)
        return SDB_STATE_ENDED;         /* it ended (any way: return, raise, kill) */
    return status == v->runnable ? SDB_STATE_RUNNING : SDB_STATE_UNKNOWN;
}

int sdb_kv_holds(const sdb_kview *kv, sdb_tstate *t, uint32_t tid, uint64_t *word,
                 const void *others, size_t stride, uint32_t n)
{
    uint64_t *w, v;
    uint32_t owner, i;
    const sdb_tstate *o;
    if (kv->words == NULL || t->kv_failed || tid == 0)
        return 0;
    w = &kv->words[tid & kv->mask];
    v = __atomic_load_n(w, __ATOMIC_ACQUIRE);
    *word = v;
    if (t->kv_tid == tid && (v >> 32) == tid)
        return 1;
    owner = (uint32_t)(v >> 32);
    if (owner != 0 && owner != tid) {
        for (i = 0; i < n; i++) {
            o = (const sdb_tstate *)((const char *)others + (size_t)i * stride);
            if (o->kv_tid == owner && o != t) {
                t->kv_failed = 1;       /* a live thread of ours holds it: procfs for this one */
                return 0;
            }
        }
    }
    *word = ((uint64_t)tid << 32) | SDB_KV_UNKNOWN;
    __atomic_store_n(w, *word, __ATOMIC_RELEASE);
    t->kv_tid = tid;
    t->kv_probe_ns = 0;
    t->asleep = 0;
    return 1;
}

uint64_t sdb_kv_settle(const sdb_kview *kv, sdb_tstate *t, const char *task_dir, uint32_t tid,
                       uint64_t word, uint64_t now_ns)
{
    uint64_t n1, expected = word;
    uint64_t *w = &kv->words[tid & kv->mask];
    int letter;
    if (now_ns - t->kv_probe_ns < SDB_KV_SETTLE_NS)
        return word;
    t->kv_probe_ns = now_ns;
    n1 = sdb_switch_ins(t, task_dir, tid);
    letter = sdb_kernel_state(t, task_dir, tid);
    if (n1 != 0 && (letter == 'S' || letter == 'D') && sdb_switch_ins(t, task_dir, tid) == n1)
        __atomic_compare_exchange_n(w, &expected, word & ~(uint64_t)(SDB_KV_UNKNOWN | SDB_KV_ON_CPU), 0,
                                    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    return __atomic_load_n(w, __ATOMIC_ACQUIRE);
}
