/* What the kernel says of a thread, for Ruby 3.1's thread states and idle reuse (the gem has no
 * GVL hooks there): procfs (/proc/P/task/T/stat's state letter, schedstat's switch-in count) and
 * the kernel view (bpf/thread_switches.c: a word per thread, tid << 32 | switch-ins << 2 | these
 * bits, mapped by kview.py). docs/internals.md, "Thread states". Everything here is nogil-safe. */
#ifndef SDB_TSTATE_H
#define SDB_TSTATE_H 1

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum {
    SDB_KV_ON_CPU = 1,                      /* the kernel view's word: on a CPU now */
    SDB_KV_UNKNOWN = 2,                     /*   registered, not switched since: not known yet */
    SDB_STATE_ENDED = 0xfe                  /* the sidecar's own state (never in a sample): th->status KILLED */
};
#define SDB_KV_SETTLE_NS 100000000ull      /* an unknown word is checked against procfs at most this often */

typedef struct sdb_tstate {    /* one thread, as the kernel showed it */
    int stat_fd;               /* <task_dir>/<tid>/stat, fd + 1 (0: not open yet, -1: never) */
    int kstate;                /* its last state letter (0: none yet) */
    int sched_fd;              /* .../schedstat, the same way */
    uint32_t asleep;           /* the last read was of a thread asleep throughout it (blocked or */
    uint32_t asleep_state;     /*   waiting for the GVL: this state); its switch-in count was */
    uint64_t switch_ins;       /*   this. While the count stays, the thread ran nothing: same stack */
    uint32_t was_idle;         /* the last read found it idle: check for sleep around the next one */
    uint32_t kv_tid;           /* kernel view: the thread registered in it (0: none), and the word */
    uint64_t kv_word;          /*   it had before the last read, if that read was taken off CPU */
    uint32_t kv_failed;        /*   1: another live thread holds its slot of the view: procfs */
    uint64_t kv_probe_ns;      /*   when its unknown word was last checked against procfs */
    uint64_t kstate_ns;        /* when kstate was read */
} sdb_tstate;

typedef struct sdb_kview {     /* the kernel view, mapped: mask + 1 words (NULL: none) */
    uint64_t *words;
    uint32_t mask;
} sdb_kview;

/* The state letter of a /proc/.../stat text (after the last ')': comm may hold anything); 0: none. */
int sdb_stat_letter(const char *buf, ssize_t n);
/* The third field of a schedstat text (times switched in); 0: none. */
uint64_t sdb_schedstat_switch_ins(const char *buf, ssize_t n);
/* <task_dir>/<tid>/<name> read into buf (NUL not added; at most cap - 1 bytes), the file kept open
 * in *fd (fd + 1; 0: open it now, -1: never). The bytes read; <= 0 when it cannot be read. */
ssize_t sdb_task_file(int *fd, const char *task_dir, uint32_t tid, const char *name, char *buf, size_t cap);
int sdb_kernel_state(sdb_tstate *t, const char *task_dir, uint32_t tid);
uint64_t sdb_switch_ins(sdb_tstate *t, const char *task_dir, uint32_t tid);
/* Its files closed and what was known of it forgotten (a thread that left, or a slot taken over). */
void sdb_tstate_close(sdb_tstate *t);
/* enum rb_thread_status's values in the running Ruby (the layout row's thread_* fields) */
typedef struct {
    uint32_t runnable, stopped, stopped_forever, killed;
} sdb_thread_statuses;
/* Ruby 3.1's th->status (enum rb_thread_status) as a state: stopped (sleep, IO, a lock, a queue) is
 * blocked, killed is ended, runnable is running (refined by the kernel: who waits for the GVL). */
uint32_t sdb_state_from_status(uint32_t status, const sdb_thread_statuses *values);
/* 1 when the view holds thread tid (registered now if need be: its word then reads unknown until
 * the thread's next switch), its word in *word. 0: no view, or another thread of ours holds the
 * slot: `others` is n threads' sdb_tstate, `stride` bytes apart (t may be one of them). */
int sdb_kv_holds(const sdb_kview *kv, sdb_tstate *t, uint32_t tid, uint64_t *word,
                 const void *others, size_t stride, uint32_t n);
/* A registered thread's word says unknown until its next switch, which a thread asleep for good
 * never makes. At most every SDB_KV_SETTLE_NS, procfs is asked: switch-in count, state S or D,
 * count again unchanged: off CPU, and if the word is still `word`, it becomes "off CPU" (a
 * compare-and-swap: a switch meanwhile wins). Returns the word as it is now. */
uint64_t sdb_kv_settle(const sdb_kview *kv, sdb_tstate *t, const char *task_dir, uint32_t tid,
                       uint64_t word, uint64_t now_ns);

#endif
