# The small C helpers every sampler module uses (_sampler_util.h), and three inline ones of its own.
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.stdlib cimport realloc

cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_mutex_t:
        pass
    int pthread_mutex_init(pthread_mutex_t *m, void *attr)
    int pthread_mutex_lock(pthread_mutex_t *m)
    int pthread_mutex_unlock(pthread_mutex_t *m)
    int pthread_mutex_destroy(pthread_mutex_t *m)

cdef extern from "_sampler_util.h" nogil:
    uint64_t sdb_load_acquire_u64(const uint64_t *p)
    void sdb_store_release_u64(uint64_t *p, uint64_t v)
    int sdb_cas_u64(uint64_t *p, uint64_t expected, uint64_t desired)
    uint32_t sdb_load_relaxed_u32(const uint32_t *p)
    uint32_t sdb_load_acquire_u32(const uint32_t *p)
    void sdb_fence_acquire()
    int sdb_load_flag(const int *p)
    void sdb_store_flag(int *p, int v)
    uint64_t sdb_now_ns()
    uint64_t sdb_wall_ns()
    void sdb_sleep_until(uint64_t deadline_ns)
    void sdb_timer_slack(uint64_t ns)
    uint64_t sdb_mix64(uint64_t x)
    uint64_t sdb_xorshift(uint64_t *s)
    int sdb_errno()
    int ESRCH, EPERM, EFAULT, EFBIG
    void sdb_eventfd_signal(int fd)
    uint64_t NO_EP "SDB_NO_EP"
    uint32_t TYPE_UNREAD "SDB_TYPE_UNREAD"
    uint64_t ADDR_MAX "SDB_ADDR_MAX"


cdef inline uint64_t u64_at(const uint8_t *p, uint32_t off) noexcept nogil:
    return (<const uint64_t *>(p + off))[0]

cdef inline uint32_t u32_at(const uint8_t *p, uint32_t off) noexcept nogil:
    return (<const uint32_t *>(p + off))[0]

cdef inline int grow(void **arr, uint64_t *cap, uint64_t need, size_t elem) noexcept nogil:
    cdef uint64_t c = cap[0]
    cdef void *p
    if need <= c:
        return 0
    if c == 0:
        c = 256
    while c < need:
        c *= 2
    p = realloc(arr[0], c * elem)
    if p == NULL:
        return -1
    arr[0] = p
    cap[0] = c
    return 0
