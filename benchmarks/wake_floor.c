/* The CPU cost of waking up 1000 times a second, and nothing else: the floor under any
 * 1 kHz sampler on this machine (timer interrupt, context switch in and out).
 *   cc -O2 -o /tmp/wake_floor benchmarks/wake_floor.c && taskset -c 0 /tmp/wake_floor */
#include <stdio.h>
#include <sys/resource.h>
#include <time.h>

int main(void)
{
    const long period_ns = 1000000, n = 5000;
    struct timespec t;
    struct rusage ru;
    double cpu;
    clock_gettime(CLOCK_MONOTONIC, &t);
    for (long i = 0; i < n; i++) {
        t.tv_nsec += period_ns;
        if (t.tv_nsec >= 1000000000L) { t.tv_nsec -= 1000000000L; t.tv_sec++; }
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL);
    }
    getrusage(RUSAGE_SELF, &ru);
    cpu = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
    printf("1 kHz wake-ups alone: %.2f%% of one core (%.1f us per wake-up)\n", cpu / (n / 1000.0) * 100,
           cpu / n * 1e6);
    return 0;
}
