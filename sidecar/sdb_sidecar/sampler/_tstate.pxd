# Thread states from the kernel: procfs and the kernel view (native/tstate.h).
from libc.stdint cimport uint32_t, uint64_t

cdef extern from "tstate.h" nogil:
    enum:
        SDB_KV_ON_CPU
        SDB_KV_UNKNOWN
        SDB_STATE_ENDED
    ctypedef struct sdb_tstate:
        int stat_fd
        int kstate
        int sched_fd
        uint32_t asleep
        uint32_t asleep_state
        uint64_t switch_ins
        uint32_t was_idle
        uint32_t kv_tid
        uint64_t kv_word
        uint32_t kv_failed
        uint64_t kv_probe_ns
        uint64_t kstate_ns
    ctypedef struct sdb_kview:
        uint64_t *words
        uint32_t mask
    int sdb_stat_letter(const char *buf, ssize_t n)
    uint64_t sdb_schedstat_switch_ins(const char *buf, ssize_t n)
    int sdb_kernel_state(sdb_tstate *t, const char *task_dir, uint32_t tid)
    uint64_t sdb_switch_ins(sdb_tstate *t, const char *task_dir, uint32_t tid)
    void sdb_tstate_close(sdb_tstate *t)
    ctypedef struct sdb_thread_statuses:
        uint32_t runnable
        uint32_t stopped
        uint32_t stopped_forever
        uint32_t killed
    uint32_t sdb_state_from_status(uint32_t status, const sdb_thread_statuses *values)
    int sdb_kv_holds(const sdb_kview *kv, sdb_tstate *t, uint32_t tid, uint64_t *word,
                     const void *others, size_t stride, uint32_t n)
    uint64_t sdb_kv_settle(const sdb_kview *kv, sdb_tstate *t, const char *task_dir, uint32_t tid,
                           uint64_t word, uint64_t now_ns)
