/**********************************************************************
 * alloc_hook.c - measurement only (issue 42): what a NEWOBJ hook costs the allocating thread,
 * and how far a hook-free design (a global allocation counter read at a fixed tick, its change
 * given to whoever runs at the tick) lands from the truth. Not part of the gem.
 *
 * AllocHook.install(mode, mean): mode 1: the callback only counts down a geometric skip by one
 *   per object (mean: objects between samples) and draws the next skip when it reaches zero;
 *   mode 2: counts down by the object's slot size (mean: bytes) and, at a sample, copies the
 *   (iseq, pc, ep[-2]) words of up to 64 control frames, the class and the size into a static
 *   ring: what the gem would copy to shared memory, with no allocation and nothing that raises;
 *   mode 3: mode 2, and each sampled object kept in an open-addressing table that a FREEOBJ hook
 *   (the same tracepoint) looks every freed object up in: the live-heap design's cost.
 * AllocHook.remove; AllocHook.stats -> [calls, samples, frames copied at the last sample,
 *   sampled objects alive, sampled objects freed, samples not tracked (table half full)].
 * AllocProbe (3.2+): enter(label) marks the calling thread's current method; start(hz) starts a
 *   native thread that reads GC.stat(:total_allocated_objects) from C at hz and adds each change
 *   to the label of the thread that last took the GVL (RESUMED event); stop -> per-label counts.
 *   The same RESUMED hook also reads the counter at each GVL hand-over and adds the change to the
 *   thread that held the GVL until then: per-thread allocations, exact if only the GVL holder
 *   allocates. thread_counts(threads) -> each given thread's count.
 **********************************************************************/
#include <ruby.h>
#include <ruby/debug.h>
#include <ruby/version.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#ifdef HAVE_RB_INTERNAL_THREAD_ADD_EVENT_HOOK
#include <ruby/thread.h>
#endif

#ifdef HAVE_RB_GC_OBJ_SLOT_SIZE
size_t rb_gc_obj_slot_size(VALUE obj); /* exported, in no public header */
#define SLOT_SIZE(o) rb_gc_obj_slot_size(o)
#else
#define SLOT_SIZE(o) 40 /* 3.1: one slot size (variable-width slots off by default) */
#endif

#define FRAMES 64
#define RING 256
#define LIVE (1 << 16) /* sampled objects tracked (mode 3); a power of two */

/* what the gem would find in its layout row: rb_execution_context_t and rb_control_frame_t
 * (docs/ruby-internals.md; the same in 3.1-4.0 but the frame size) */
#define EC_VM_STACK 0
#define EC_VM_STACK_SIZE 8
#define EC_CFP 16
#if RUBY_API_VERSION_MAJOR == 3 && RUBY_API_VERSION_MINOR < 3
#define CFP_SIZE 64
#else
#define CFP_SIZE 56
#endif
#define CFP_PC 0
#define CFP_ISEQ 16
#define CFP_EP 32

struct ah_sample {
    uint64_t klass, size, depth;
    uint64_t words[FRAMES][3];
};

static struct {
    VALUE tp;
    int mode;
    uint64_t mean, skip, rng, calls, samples;
    struct ah_sample ring[RING];
    uint32_t head;
    VALUE live[LIVE];
    uint64_t live_n, freed, full;
} ah;

static inline uint32_t
ah_hash(VALUE obj)
{
    return (uint32_t)(((uint64_t)obj >> 3) * 0x9e3779b97f4a7c15ULL >> 48) & (LIVE - 1);
}

static void
ah_live_add(VALUE obj)
{
    uint32_t i = ah_hash(obj);
    if (ah.live_n >= LIVE / 2) { ah.full++; return; } /* counted, never grown inside the hook */
    while (ah.live[i]) i = (i + 1) & (LIVE - 1);
    ah.live[i] = obj;
    ah.live_n++;
}

static void
ah_live_free(VALUE obj)
{
    uint32_t i = ah_hash(obj), j, k;
    while (ah.live[i] && ah.live[i] != obj) i = (i + 1) & (LIVE - 1);
    if (!ah.live[i]) return;
    ah.freed++;
    ah.live_n--;
    /* backward-shift deletion: no tombstones to slow later look-ups */
    for (j = i;;) {
        ah.live[i] = 0;
        for (;;) {
            j = (j + 1) & (LIVE - 1);
            if (!ah.live[j]) return;
            k = ah_hash(ah.live[j]);
            if (i <= j ? (i < k && k <= j) : (i < k || k <= j)) continue;
            break;
        }
        ah.live[i] = ah.live[j];
        i = j;
    }
}

static uint64_t
ah_next_skip(void)
{
    /* xorshift64 and -ln(u) by a fixed-point approximation would do; the double log is fine here:
     * it runs once per sample, not per allocation */
    double u;
    ah.rng ^= ah.rng << 13; ah.rng ^= ah.rng >> 7; ah.rng ^= ah.rng << 17;
    u = ((ah.rng >> 11) + 1) * (1.0 / 9007199254740993.0);
    return (uint64_t)(-__builtin_log(u) * (double)ah.mean) + 1;
}

struct ah_trace_arg { /* rb_trace_arg_t's first three members (vm_core.h, 3.1-4.0) */
    uint32_t event;
    uintptr_t ec, cfp;
};

static void
ah_copy_stack(VALUE tpval, VALUE obj, uint64_t size)
{
    struct ah_trace_arg *ta = (struct ah_trace_arg *)rb_tracearg_from_tracepoint(tpval);
    struct ah_sample *s = &ah.ring[ah.head++ % RING];
    uintptr_t ec = ta->ec, cfp, end;
    uint64_t d = 0;
    cfp = *(uintptr_t *)(ec + EC_CFP);
    end = *(uintptr_t *)(ec + EC_VM_STACK) + *(uint64_t *)(ec + EC_VM_STACK_SIZE) * sizeof(VALUE);
    for (; cfp + CFP_SIZE < end && d < FRAMES; cfp += CFP_SIZE, d++) {
        uintptr_t ep = *(uintptr_t *)(cfp + CFP_EP);
        s->words[d][0] = *(uint64_t *)(cfp + CFP_ISEQ);
        s->words[d][1] = *(uint64_t *)(cfp + CFP_PC);
        s->words[d][2] = ep ? *(uint64_t *)(ep - 2 * sizeof(VALUE)) : 0;
    }
    s->depth = d;
    s->klass = RBASIC(obj)->klass;
    s->size = size;
}

static void
ah_newobj(VALUE tpval, void *data)
{
    (void)data;
    if (ah.mode == 3 && rb_tracearg_event_flag(rb_tracearg_from_tracepoint(tpval)) == RUBY_INTERNAL_EVENT_FREEOBJ) {
        ah_live_free(rb_tracearg_object(rb_tracearg_from_tracepoint(tpval)));
        return;
    }
    ah.calls++;
    if (ah.mode == 1) {
        if (--ah.skip == 0) { ah.samples++; ah.skip = ah_next_skip(); }
        return;
    }
    {
        VALUE obj = rb_tracearg_object(rb_tracearg_from_tracepoint(tpval));
        uint64_t size = SLOT_SIZE(obj);
        if (ah.skip > size) { ah.skip -= size; return; }
        ah.samples++;
        ah_copy_stack(tpval, obj, size);
        if (ah.mode == 3) ah_live_add(obj);
        ah.skip = ah_next_skip();
    }
}

static VALUE
ah_install(VALUE self, VALUE mode, VALUE mean)
{
    (void)self;
    if (ah.tp) rb_raise(rb_eRuntimeError, "AllocHook: already installed");
    ah.mode = NUM2INT(mode);
    ah.mean = NUM2ULL(mean);
    if (ah.mean == 0) rb_raise(rb_eArgError, "AllocHook: the mean interval must be > 0");
    ah.rng = 0x9e3779b97f4a7c15ULL;
    ah.calls = ah.samples = ah.live_n = ah.freed = ah.full = 0;
    memset(ah.live, 0, sizeof ah.live);
    ah.skip = ah_next_skip();
    ah.tp = rb_tracepoint_new(Qnil, RUBY_INTERNAL_EVENT_NEWOBJ | (ah.mode == 3 ? RUBY_INTERNAL_EVENT_FREEOBJ : 0),
                              ah_newobj, NULL);
    rb_gc_register_address(&ah.tp);
    rb_tracepoint_enable(ah.tp);
    return Qnil;
}

static VALUE
ah_remove(VALUE self)
{
    (void)self;
    if (ah.tp) {
        rb_tracepoint_disable(ah.tp);
        rb_gc_unregister_address(&ah.tp);
        ah.tp = 0;
    }
    return Qnil;
}

static VALUE
ah_stats(VALUE self)
{
    (void)self;
    return rb_ary_new_from_args(6, ULL2NUM(ah.calls), ULL2NUM(ah.samples),
                                ULL2NUM(ah.samples ? ah.ring[(ah.head - 1) % RING].depth : 0),
                                ULL2NUM(ah.live_n), ULL2NUM(ah.freed), ULL2NUM(ah.full));
}

/* ---------- AllocProbe: the hook-free design, approximated in-process ---------- */
#define LABELS 16
#define THREADS 64

static struct {
    VALUE threads[THREADS];          /* Thread objects seen by enter */
    volatile int label[THREADS];      /* each one's current method */
    volatile VALUE running;           /* the thread that last took the GVL */
    volatile int stop;
    uint64_t counts[LABELS], ticks, unattributed;
    uint64_t per_thread[THREADS], handover_last; /* exact per-thread counts by GVL hand-over */
    int holder;                                  /* slot of the GVL holder, -1: not a known thread */
    VALUE sym_total;
    long hz;
    pthread_t tid;
    void *hook;
} ap;

static int
ap_slot(VALUE th)
{
    for (int i = 0; i < THREADS; i++) {
        if (ap.threads[i] == th) return i;
        if (!ap.threads[i]) { ap.threads[i] = th; return i; }
    }
    return -1;
}

static VALUE
ap_enter(VALUE self, VALUE label)
{
    int i = ap_slot(rb_thread_current());
    (void)self;
    if (i >= 0) ap.label[i] = FIX2INT(label);
    return label;
}

#ifdef HAVE_RB_INTERNAL_THREAD_ADD_EVENT_HOOK
static void
ap_resumed(rb_event_flag_t ev, const rb_internal_thread_event_data_t *d, void *data)
{
    uint64_t now = rb_gc_stat(ap.sym_total);
    (void)ev; (void)data;
    if (ap.holder >= 0) ap.per_thread[ap.holder] += now - ap.handover_last;
    ap.handover_last = now;
    ap.holder = ap_slot(d->thread);
    ap.running = d->thread;
}
#endif

static void *
ap_loop(void *arg)
{
    struct timespec next;
    uint64_t last = rb_gc_stat(ap.sym_total), now;
    (void)arg;
    clock_gettime(CLOCK_MONOTONIC, &next);
    while (!ap.stop) {
        next.tv_nsec += 1000000000L / ap.hz;
        if (next.tv_nsec >= 1000000000L) { next.tv_nsec -= 1000000000L; next.tv_sec++; }
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
        now = rb_gc_stat(ap.sym_total); /* plain reads of objspace counters (3.2-3.4: no flush) */
        {
            VALUE th = ap.running;
            int i, l = -1;
            for (i = 0; i < THREADS && ap.threads[i]; i++)
                if (ap.threads[i] == th) { l = ap.label[i]; break; }
            if (l >= 0 && l < LABELS) ap.counts[l] += now - last;
            else ap.unattributed += now - last;
        }
        ap.ticks++;
        last = now;
    }
    return NULL;
}

static VALUE
ap_start(VALUE self, VALUE hz)
{
    (void)self;
#ifdef HAVE_RB_INTERNAL_THREAD_ADD_EVENT_HOOK
    memset(ap.counts, 0, sizeof ap.counts);
    ap.ticks = ap.unattributed = 0;
    ap.stop = 0;
    ap.hz = NUM2LONG(hz);
    ap.sym_total = ID2SYM(rb_intern("total_allocated_objects"));
    ap.running = rb_thread_current();
    memset(ap.per_thread, 0, sizeof ap.per_thread);
    ap.holder = ap_slot(ap.running);
    ap.handover_last = rb_gc_stat(ap.sym_total);
    ap.hook = rb_internal_thread_add_event_hook(ap_resumed, RUBY_INTERNAL_THREAD_EVENT_RESUMED, NULL);
    if (pthread_create(&ap.tid, NULL, ap_loop, NULL)) rb_raise(rb_eRuntimeError, "AllocProbe: no thread");
    return Qnil;
#else
    (void)hz;
    rb_raise(rb_eNotImpError, "AllocProbe needs rb_internal_thread_add_event_hook (Ruby 3.2+)");
#endif
}

static VALUE
ap_stop(VALUE self)
{
    VALUE out = rb_ary_new();
    (void)self;
#ifdef HAVE_RB_INTERNAL_THREAD_ADD_EVENT_HOOK
    ap.stop = 1;
    pthread_join(ap.tid, NULL);
    rb_internal_thread_remove_event_hook(ap.hook);
    if (ap.holder >= 0) ap.per_thread[ap.holder] += rb_gc_stat(ap.sym_total) - ap.handover_last;
#endif
    for (int i = 0; i < LABELS; i++) rb_ary_push(out, ULL2NUM(ap.counts[i]));
    return rb_ary_new_from_args(3, out, ULL2NUM(ap.ticks), ULL2NUM(ap.unattributed));
}

static VALUE
ap_thread_counts(VALUE self, VALUE threads)
{
    VALUE out = rb_ary_new();
    (void)self;
    for (long k = 0; k < RARRAY_LEN(threads); k++) {
        int i = ap_slot(rb_ary_entry(threads, k));
        rb_ary_push(out, ULL2NUM(i >= 0 ? ap.per_thread[i] : 0));
    }
    return out;
}

void
Init_alloc_hook(void)
{
    VALUE h = rb_define_module("AllocHook"), p = rb_define_module("AllocProbe");
    rb_define_module_function(h, "install", ah_install, 2);
    rb_define_module_function(h, "remove", ah_remove, 0);
    rb_define_module_function(h, "stats", ah_stats, 0);
    rb_define_module_function(p, "enter", ap_enter, 1);
    rb_define_module_function(p, "start", ap_start, 1);
    rb_define_module_function(p, "stop", ap_stop, 0);
    rb_define_module_function(p, "thread_counts", ap_thread_counts, 1);
}
