/**********************************************************************
 * sdb_sigprof.c - test-only reference profiler: Ruby's own innermost frame
 * (rb_profile_frames) taken in a signal handler at the moment of the signal.
 *
 * stackprof 0.2.21 (Debian's) takes its sample in a postponed job that its
 * signal registers, when Ruby next checks interrupts: time spent in a C
 * function that checks none (Array#sort, Array#join, String#* ...) goes to
 * the Ruby code that runs after it. This one reads the frame in the
 * handler itself (rb_profile_frames only reads the VM's frames; Ruby
 * publishes a pushed frame after its fields, for signal handlers), so its
 * samples are where the thread was.
 *
 *   SdbSigprof.start(interval_us)  a CLOCK_MONOTONIC timer signalling the
 *                                  calling thread (SIGPROF) after a random
 *                                  interval of mean interval_us, re-armed
 *                                  by each signal
 *   SdbSigprof.stop -> [[t_ns, label], ...]   one per sample, label as
 *                                  rb_profile_frame_full_label gives it,
 *                                  "(garbage collection)" during GC
 *
 * The handler allocates nothing: it appends (time, frame) to a fixed
 * array; each distinct frame is kept in a fixed table that a mark function
 * pins, so no frame sampled is freed or moved before stop labels it.
 **********************************************************************/
#include <ruby.h>
#include <ruby/debug.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_SAMPLES (1u << 21)          /* ~35 min at 1 kHz */
#define MAX_FRAMES (1u << 16)           /* distinct frames (a power of two) */
#define GC_FRAME ((uint32_t)0xffffffff)
#define NO_FRAME ((uint32_t)0xfffffffe)

struct sample { uint64_t t_ns; uint32_t frame; };

static struct {
    struct sample *samples;
    volatile uint32_t n;
    uint32_t lost;                      /* samples past MAX_SAMPLES, or frames past MAX_FRAMES */
    VALUE *frames;                      /* open addressing by VALUE; 0: empty */
    timer_t timer;
    long interval_ns;                   /* the mean interval */
    uint64_t rng;                       /* xorshift64 state for the next interval */
    int running;
    VALUE keeper;                       /* the object whose mark function pins `frames` */
} S;

static uint64_t
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Arm the timer once, for a uniformly random interval in [0.5, 1.5) of the
 * mean: a periodic timer samples a periodic loop at the same few phases for
 * seconds (the loop of sort_and_count.rb gave shares 3 points off its own
 * clock, either way, run to run); random intervals sample every phase.
 * timer_settime is async-signal-safe. */
static void
arm_next(void)
{
    struct itimerspec its;
    long ns;
    S.rng ^= S.rng << 13; S.rng ^= S.rng >> 7; S.rng ^= S.rng << 17;
    ns = S.interval_ns / 2 + (long)(S.rng % (uint64_t)S.interval_ns);
    memset(&its, 0, sizeof(its));
    its.it_value.tv_sec = ns / 1000000000;
    its.it_value.tv_nsec = ns % 1000000000;
    timer_settime(S.timer, 0, &its, NULL);
}

static uint32_t
frame_slot(VALUE frame)
{
    uint32_t i = (uint32_t)((frame >> 3) * 0x9e3779b1u) & (MAX_FRAMES - 1), k;
    for (k = 0; k < MAX_FRAMES; k++, i = (i + 1) & (MAX_FRAMES - 1)) {
        if (S.frames[i] == frame) return i;
        if (S.frames[i] == 0) { S.frames[i] = frame; return i; }
    }
    return NO_FRAME;
}

static void
on_signal(int sig, siginfo_t *info, void *uc)
{
    VALUE frame;
    int line, n, saved = errno;
    uint32_t f;
    if (S.n >= MAX_SAMPLES) { S.lost++; errno = saved; return; }
    if (rb_during_gc()) {
        f = GC_FRAME;
    } else {
        n = rb_profile_frames(0, 1, &frame, &line);
        f = n == 1 ? frame_slot(frame) : NO_FRAME;
        if (f == NO_FRAME && n == 1) S.lost++;
    }
    S.samples[S.n].t_ns = now_ns();
    S.samples[S.n].frame = f;
    S.n++;
    if (S.running) arm_next();
    errno = saved;
}

static void
keeper_mark(void *p)
{
    uint32_t i;
    if (!S.frames) return;
    for (i = 0; i < MAX_FRAMES; i++)
        if (S.frames[i]) rb_gc_mark(S.frames[i]);     /* pinned: never moved */
}

static const rb_data_type_t keeper_type = {"sdb_sigprof_keeper", {keeper_mark, NULL, NULL}, 0, 0, 0};

static VALUE
sigprof_start(VALUE self, VALUE interval_us)
{
    struct sigaction sa;
    struct sigevent sev;
    long us = NUM2LONG(interval_us);
    if (S.running) rb_raise(rb_eRuntimeError, "already started");
    if (!S.samples) S.samples = ALLOC_N(struct sample, MAX_SAMPLES);
    if (!S.frames) S.frames = ALLOC_N(VALUE, MAX_FRAMES);
    memset(S.frames, 0, sizeof(VALUE) * MAX_FRAMES);
    S.n = 0;
    S.lost = 0;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGPROF, &sa, NULL) != 0) rb_sys_fail("sigaction");
    memset(&sev, 0, sizeof(sev));
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = SIGPROF;
    sev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
    if (timer_create(CLOCK_MONOTONIC, &sev, &S.timer) != 0) rb_sys_fail("timer_create");
    if (us < 2) rb_raise(rb_eArgError, "interval_us must be at least 2");
    S.interval_ns = us * 1000;
    S.rng = now_ns() | 1;
    S.running = 1;
    arm_next();
    return Qnil;
}

static VALUE
sigprof_stop(VALUE self)
{
    VALUE out, labels, label;
    uint32_t i, n;
    if (!S.running) rb_raise(rb_eRuntimeError, "not started");
    S.running = 0;
    timer_delete(S.timer);
    signal(SIGPROF, SIG_IGN);
    n = S.n;
    labels = rb_ary_new_capa(MAX_FRAMES);
    for (i = 0; i < MAX_FRAMES; i++)
        rb_ary_push(labels, S.frames[i] ? rb_profile_frame_full_label(S.frames[i]) : Qnil);
    out = rb_ary_new_capa(n);
    for (i = 0; i < n; i++) {
        uint32_t f = S.samples[i].frame;
        label = f == GC_FRAME ? rb_str_new_cstr("(garbage collection)")
              : f == NO_FRAME ? rb_str_new_cstr("(no frame)") : rb_ary_entry(labels, f);
        rb_ary_push(out, rb_ary_new_from_args(2, ULL2NUM(S.samples[i].t_ns), label));
    }
    return out;
}

static VALUE
sigprof_lost(VALUE self)
{
    return UINT2NUM(S.lost);
}

void
Init_sdb_sigprof(void)
{
    VALUE m = rb_define_module("SdbSigprof");
    S.keeper = TypedData_Wrap_Struct(rb_cObject, &keeper_type, &S);   /* non-NULL: Ruby marks only data it has */
    rb_gc_register_mark_object(S.keeper);
    rb_define_module_function(m, "start", sigprof_start, 1);
    rb_define_module_function(m, "stop", sigprof_stop, 0);
    rb_define_module_function(m, "lost", sigprof_lost, 0);
}
