/* Small C helpers for _sampler.pyx: atomics on the shared registry,
 * clocks, hashing, a PRNG for tick jitter, the drain loop's eventfd. Everything here is nogil-safe. */
#ifndef SDB_SAMPLER_UTIL_H
#define SDB_SAMPLER_UTIL_H 1

#define _GNU_SOURCE 1
#include <stdint.h>
#include <time.h>
#include <errno.h>
#include <sys/prctl.h>
#include <string.h>
#include <unistd.h>

/* Constants the sampler's Cython modules share (64-bit: no Cython enum holds them). */
#define SDB_NO_EP 0xffffffffffffffffULL         /* a frame whose ep words were not read */
#define SDB_TYPE_UNREAD 0xffffffffU            /* an ISeq whose type was not read */
/* Every address taken from the target is below this (x86-64 user space, 5-level paging included)
 * before any arithmetic on it: far from 2**64, so `a + span` never wraps. */
#define SDB_ADDR_MAX 0x0100000000000000ULL

static inline uint64_t sdb_load_acquire_u64(const volatile uint64_t *p)
{
    return __atomic_load_n((const uint64_t *)p, __ATOMIC_ACQUIRE);
}

static inline uint32_t sdb_load_acquire_u32(const volatile uint32_t *p)
{
    return __atomic_load_n((const uint32_t *)p, __ATOMIC_ACQUIRE);
}

static inline uint32_t sdb_load_relaxed_u32(const volatile uint32_t *p)
{
    return __atomic_load_n((const uint32_t *)p, __ATOMIC_RELAXED);
}

static inline void sdb_fence_acquire(void) { __atomic_thread_fence(__ATOMIC_ACQUIRE); }

static inline int sdb_load_flag(const volatile int *p) { return __atomic_load_n((const int *)p, __ATOMIC_ACQUIRE); }
static inline void sdb_store_flag(volatile int *p, int v) { __atomic_store_n((int *)p, v, __ATOMIC_RELEASE); }
static inline void sdb_store_release_u64(volatile uint64_t *p, uint64_t v) { __atomic_store_n((uint64_t *)p, v, __ATOMIC_RELEASE); }
/* 1 if *p held expected and now holds desired */
static inline int sdb_cas_u64(volatile uint64_t *p, uint64_t expected, uint64_t desired)
{
    return __atomic_compare_exchange_n((uint64_t *)p, &expected, desired, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

static inline uint64_t sdb_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t sdb_wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void sdb_sleep_until(uint64_t deadline_ns)
{
    struct timespec ts;
    ts.tv_sec = (time_t)(deadline_ns / 1000000000ull);
    ts.tv_nsec = (long)(deadline_ns % 1000000000ull);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

/* Timer slack for this thread: the kernel may fire a sleep's timer up to this late to batch
 * wake-ups (default 50 us). Tighter slack costs CPU per wake-up, so it is a share of the
 * period: 50 us at 1 kHz (inside the tick jitter anyway), 5 us at 10 kHz. */
static inline void sdb_timer_slack(uint64_t ns) { prctl(PR_SET_TIMERSLACK, (unsigned long)ns, 0, 0, 0); }

static inline uint64_t sdb_mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static inline uint64_t sdb_xorshift(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *s = x;
    return x;
}

static inline int sdb_errno(void) { return errno; }

/* Wake a reader waiting on an eventfd (the recorder's drain loop). One write, never blocks
 * (EFD_NONBLOCK: a full counter only means a wake-up is already pending). */
static inline void sdb_eventfd_signal(int fd)
{
    uint64_t one = 1;
    if (fd >= 0 && write(fd, &one, sizeof one) < 0) {
    }
}

#endif
