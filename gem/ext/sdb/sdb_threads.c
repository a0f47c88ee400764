/**********************************************************************
 * sdb_threads.c - slots and thread lifecycle: the THREAD_BEGIN/END hook, Ruby >= 3.2's internal
 * thread hook (run without the GVL: plain stores only), the sweep of dead slots, fork and exec.
 **********************************************************************/
#include "sdb_gem.h"

/* ---------- slots ----------
 * Handed out and taken back with the GVL held (free_stack, used, threads). The only other
 * writers are the thread event hooks (Ruby >= 3.2), which run without the GVL: they store a
 * thread's state word and mark an ended thread's slot dead (live = 0, dead_pending + 1); the
 * next registration's sweep hands such slots back. */

/* Before 3.3 the Thread of every handed-out slot is kept alive (its rb_thread_t is read by the
 * sweep and by the sidecar) in a plain C array, marked here: a store is one word (a Ruby Array
 * cost ~160 instructions a store, in the thread hooks, for its checks and write barrier). The
 * holder is not write-barrier protected, so the GC marks it at every collection, minor ones too.
 * rb_gc_mark pins the Threads: GC.compact never moves what the array points at. */
static void
sdb_threads_mark(void *unused)
{
    uint32_t i;
    (void)unused;
    if (!sdb.threads) return;
    for (i = 0; i < sdb.hiwater; i++)
        if (sdb.threads[i]) rb_gc_mark(sdb.threads[i]);
}

const rb_data_type_t sdb_threads_type = {
    "sdb_threads", { sdb_threads_mark, NULL, NULL, }, 0, 0, 0
};

uint64_t
sdb_thread_ptr(VALUE thread)
{
    return (uint64_t)(uintptr_t)SDB_TYPED_DATA(thread);
}

static void
sdb_slot_release(uint32_t idx)
{
    struct sdb_slot *s = &sdb.slots[idx];
    if (!sdb.used[idx]) return;
    if (s == sdb_tls_slot) sdb_tls_set(NULL);
    sdb_slot_lock(s);
    s->live = 0;
    s->state = SDB_STATE_UNKNOWN;
    sdb_slot_unlock(s);
    __atomic_store_n(&sdb.used[idx], 0, __ATOMIC_RELEASE);
#if !SDB_HOOK_NAMES_THREAD
    sdb.threads[idx] = 0;
#endif
    sdb.free_stack[sdb.free_top++] = idx;
}

#if !SDB_HOOK_NAMES_THREAD
/* Before 3.3: has the slot's thread ended (th->status KILLED)? Its Thread is kept in
 * sdb.threads, so its rb_thread_t is still there to read. */
static int
sdb_slot_thread_dead(uint32_t idx)
{
    VALUE th = sdb.threads[idx];
    const struct sdb_layout *L = &sdb.layout;
    if (!th) return 1;
    if (L->thread_status != SDB_NA) {
        uint8_t b = *((const uint8_t *)RTYPEDDATA_DATA(th) + L->thread_status);
        return ((b >> L->thread_status_shift) & L->thread_status_mask) == L->thread_killed;
    }
    return !RTEST(rb_funcall(th, sdb_id_alive_p, 0));
}
#endif

/* Hands back the slots of threads that ended: marked dead by the EXITED hook (3.3+), or, before
 * 3.3, ended by an exception or a kill (no THREAD_END event then) or marked by the 3.2 hook. */
static void
sdb_sweep(void)
{
    uint32_t i, n = sdb.hiwater;
#if SDB_HOOK_NAMES_THREAD
    if (!__atomic_exchange_n(&sdb.dead_pending, 0, __ATOMIC_ACQ_REL)) return;
#endif
    for (i = 0; i < n; i++) {
        if (!sdb.used[i]) continue;
        if (!__atomic_load_n(&sdb.slots[i].live, __ATOMIC_ACQUIRE)) {
            sdb_slot_release(i);
            continue;
        }
#if !SDB_HOOK_NAMES_THREAD
        if (sdb_slot_thread_dead(i)) sdb_slot_release(i);
#endif
    }
}

/* With the GVL held. `name`: the thread's name (a String or nil); `current`: `thread` is the
 * calling thread (it runs this, holding the GVL). */
int
sdb_slot_register(VALUE thread, uint32_t tid, VALUE name, uint32_t flags, int current)
{
    uint32_t idx;
    struct sdb_slot *s;
    uint64_t th;

    if (!sdb.enabled) return -1;
    sdb_sweep();
    if (sdb.free_top == 0 && sdb.hiwater >= sdb.slot_count) {
        if (!sdb.warned_full) {
            char msg[200];
            sdb.warned_full = 1;
            snprintf(msg, sizeof(msg),
                     "sdb: all %u registry slots are taken; new threads are not profiled "
                     "(raise SDB_MAX_THREADS)", sdb.slot_count);
            sdb_warn(msg);
        }
        return -1;
    }
    idx = sdb.free_top ? sdb.free_stack[--sdb.free_top] : sdb.hiwater;
#if !SDB_HOOK_NAMES_THREAD
    sdb.threads[idx] = thread; /* no write barrier: the holder is not write-barrier protected */
#endif
    th = sdb_thread_ptr(thread);

    s = &sdb.slots[idx];
    sdb_slot_lock(s);
    s->live = 1;
    s->native_tid = tid;
    s->serial = sdb.next_serial++;
    s->thread_addr = th;
    s->ec_addr = th + sdb.layout.thread_ec;
    s->start_mono_ns = sdb_now_ns(CLOCK_MONOTONIC);
    s->start_wall_ns = sdb_now_ns(CLOCK_REALTIME);
    s->state = SDB_STATE_UNKNOWN;
#ifdef HAVE_RB_INTERNAL_THREAD_ADD_EVENT_HOOK
    if (current) s->state = SDB_STATE_RUNNING; /* it runs this, holding the GVL */
#endif
    s->flags = flags;
    __atomic_store_n(&s->span, 0, __ATOMIC_RELAXED);
    s->span_ec = 0;
    if (RB_TYPE_P(name, T_STRING))
        sdb_copy_cstr(s->name, SDB_NAME_MAX, RSTRING_PTR(name), RSTRING_LEN(name));
    else
        memset(s->name, 0, SDB_NAME_MAX);
    sdb_slot_unlock(s);
    __atomic_store_n(&sdb.used[idx], 1, __ATOMIC_RELEASE);
    if (idx >= sdb.hiwater) __atomic_store_n(&sdb.hiwater, idx + 1, __ATOMIC_RELEASE);
    __atomic_fetch_add(&sdb.registrations, 1, __ATOMIC_RELEASE);
    if (current) sdb_tls_set(s);
    return (int)idx;
}

/* The slot registered for rb_thread_t* `th`, or NULL. Any thread, GVL or not: loads only. */
struct sdb_slot *
sdb_slot_of(uint64_t th)
{
    struct sdb_slot *slots = sdb.slots;
    uint32_t i, n = __atomic_load_n(&sdb.hiwater, __ATOMIC_ACQUIRE);
    if (!slots || !th) return NULL;
    if (sdb_tls_slot && sdb_tls_thread == th && __atomic_load_n(&sdb_tls_slot->serial, __ATOMIC_RELAXED) == sdb_tls_serial)
        return sdb_tls_slot;
    for (i = 0; i < n; i++) {
        struct sdb_slot *s = &slots[i];
        if (__atomic_load_n(&sdb.used[i], __ATOMIC_ACQUIRE) && __atomic_load_n(&s->live, __ATOMIC_ACQUIRE) &&
            __atomic_load_n(&s->thread_addr, __ATOMIC_RELAXED) == th)
            return s;
    }
    return NULL;
}

/* Thread#native_thread_id and Thread#name: Ruby's own C functions, called directly when found
 * (sdb_find_thread_getters), else through rb_funcall. */
static VALUE
sdb_thread_tid_value(VALUE thread)
{
    return sdb.orig_native_thread_id ? sdb.orig_native_thread_id(thread)
                                     : rb_funcall(thread, sdb_id_native_thread_id, 0);
}

VALUE
sdb_thread_name(VALUE thread)
{
    return sdb.orig_thread_name ? sdb.orig_thread_name(thread) : rb_funcall(thread, sdb_id_name, 0);
}

/* ---------- thread lifecycle, from C: no Ruby frame, no patched Ruby method ----------
 * A thread registers itself in Ruby's RUBY_EVENT_THREAD_BEGIN event (a C event hook of the
 * main Ractor: Ruby calls it on the new thread, with the GVL, before the thread's block runs;
 * Thread.new, Thread.start, Thread.fork and rb_thread_create alike). Its slot goes back at its
 * end: the EXITED thread hook (3.3+: every end) or RUBY_EVENT_THREAD_END (3.1: a block that
 * returns; an exception or a kill is found by the next sweep). Event hooks are per Ractor:
 * threads of other Ractors never reach these (they are left alone, unregistered). */
void
sdb_thread_event_hook(rb_event_flag_t ev, VALUE data, VALUE self, ID mid, VALUE klass)
{
    /* Ruby passes the thread as self (thread.c thread_do_start: th->self), and runs this on it */
    VALUE th = self;
    (void)data; (void)mid; (void)klass;
    if (!sdb.enabled) return;
    if (ev & RUBY_EVENT_THREAD_BEGIN) {
        /* Ruby keeps the native id; asking the kernel (gettid) costs a syscall, whose return is
         * a point where the scheduler may switch to the thread that made this one. */
        VALUE tid = sdb_thread_tid_value(th);
        sdb_slot_register(th, FIXNUM_P(tid) ? (uint32_t)FIX2LONG(tid) : sdb_gettid(), sdb_thread_name(th), 0, 1);
    }
#if !SDB_HOOK_NAMES_THREAD
    else if (ev & RUBY_EVENT_THREAD_END) {
        struct sdb_slot *s = sdb_slot_of(sdb_thread_ptr(th));
        if (s) sdb_slot_release((uint32_t)(s - sdb.slots));
    }
#endif
}

#ifdef HAVE_RB_INTERNAL_THREAD_ADD_EVENT_HOOK
/* Without the GVL: marks a slot dead (seqlock write: the GVL side holds a slot's lock only for
 * a few stores and never waits for us, so spinning ends). */
static void
sdb_slot_mark_dead(struct sdb_slot *s)
{
    uint64_t g;
    for (;;) {
        g = __atomic_load_n(&s->gen, __ATOMIC_ACQUIRE);
        if (!(g & 1) && __atomic_compare_exchange_n(&s->gen, &g, g + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            break;
        sched_yield();
    }
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n(&s->live, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&s->state, SDB_STATE_UNKNOWN, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n(&s->gen, g + 2, __ATOMIC_RELEASE);
    __atomic_fetch_add(&sdb.hdr->gen, 1, __ATOMIC_RELEASE);
    __atomic_fetch_add(&sdb.dead_pending, 1, __ATOMIC_RELEASE);
}

/* Ruby >= 3.2 calls this at every GVL transition of every thread, mostly without the GVL, and
 * at a thread's exit: loads and stores into the thread's own slot, nothing that can block or
 * allocate. READY = wants the GVL, RESUMED = got it (runs Ruby), SUSPENDED = gave it up (sleep,
 * IO, a lock, a queue, or a switch: a READY follows at once then), EXITED = ended. */
void
sdb_thread_event(rb_event_flag_t event, const rb_internal_thread_event_data_t *data, void *arg)
{
    struct sdb_slot *s = NULL;
    uint32_t state;
    (void)arg;
    if (!sdb.slots || !__atomic_load_n(&sdb.enabled, __ATOMIC_RELAXED)) return;
#if SDB_HOOK_NAMES_THREAD
    {
        uint64_t th = data && data->thread ? sdb_thread_ptr(data->thread) : 0;
        if (sdb_tls_thread == th && !sdb_tls_slot &&
            sdb_tls_regs == __atomic_load_n(&sdb.registrations, __ATOMIC_ACQUIRE))
            return; /* a thread with no slot (another Ractor's), nothing registered since */
        s = sdb_slot_of(th);
        if (s) {
            if (s != sdb_tls_slot) sdb_tls_set(s);
        }
        else {
            sdb_tls_slot = NULL;
            sdb_tls_thread = th;
            sdb_tls_regs = __atomic_load_n(&sdb.registrations, __ATOMIC_ACQUIRE);
            return;
        }
    }
    if (event & RUBY_INTERNAL_THREAD_EVENT_EXITED) {
        sdb_slot_mark_dead(s);
        sdb_tls_set(NULL);
        return;
    }
#else
    /* 3.2: no thread in the event data; this native thread's cached slot, and at exit the
     * slot whose tid is this native thread's */
    (void)data;
    s = sdb_tls_slot;
    if (event & RUBY_INTERNAL_THREAD_EVENT_EXITED) {
        uint32_t tid = sdb_gettid(), i, n = __atomic_load_n(&sdb.hiwater, __ATOMIC_ACQUIRE);
        sdb_tls_set(NULL);
        for (i = 0; i < n; i++) {
            struct sdb_slot *x = &sdb.slots[i];
            if (__atomic_load_n(&sdb.used[i], __ATOMIC_ACQUIRE) && __atomic_load_n(&x->live, __ATOMIC_ACQUIRE) &&
                __atomic_load_n(&x->native_tid, __ATOMIC_RELAXED) == tid)
                sdb_slot_mark_dead(x);
        }
        return;
    }
    if (!s || __atomic_load_n(&s->serial, __ATOMIC_RELAXED) != sdb_tls_serial) return;
#endif
    /* only this thread writes its state word: a plain load and store suffice */
    state = __atomic_load_n(&s->state, __ATOMIC_RELAXED);
    if (event & RUBY_INTERNAL_THREAD_EVENT_RESUMED)   /* one more run: bump the count above the state */
        state = ((state & ~SDB_STATE_MASK) + (1u << SDB_STATE_RUNS_SHIFT)) | SDB_STATE_RUNNING;
    else if (event & RUBY_INTERNAL_THREAD_EVENT_READY)
        state = (state & ~SDB_STATE_MASK) | SDB_STATE_GVL_WAIT;
    else
        state = (state & ~SDB_STATE_MASK) | SDB_STATE_BLOCKED;
    __atomic_store_n(&s->state, state, __ATOMIC_RELAXED);
}
#endif

/* Registers the threads alive at require (threads of this Ractor): released at their end as
 * any thread is (their THREAD_END / EXITED events come, as for threads made later). */
void
sdb_adopt_running_threads(void)
{
    VALUE list = rb_funcall(rb_cThread, rb_intern("list"), 0), main = rb_thread_main();
    long i;
    for (i = 0; i < RARRAY_LEN(list); i++) {
        VALUE th = RARRAY_AREF(list, i);
        VALUE tid = rb_funcall(th, sdb_id_native_thread_id, 0);
        if (NIL_P(tid)) continue; /* not started or already dead */
        sdb_slot_register(th, NUM2UINT(tid), rb_funcall(th, sdb_id_name, 0),
                          (th == main ? SDB_SLOT_MAIN : 0) | SDB_SLOT_ADOPTED, th == rb_thread_current());
    }
}

/* Updates the name in the slot of rb_thread_t* th. With the GVL. */
void
sdb_slot_rename(uint64_t th, VALUE name)
{
    uint32_t i;
    if (!sdb.enabled) return;
    for (i = 0; i < sdb.hiwater; i++) {
        struct sdb_slot *s = &sdb.slots[i];
        if (!sdb.used[i] || s->thread_addr != th) continue;
        sdb_slot_lock(s);
        if (RB_TYPE_P(name, T_STRING))
            sdb_copy_cstr(s->name, SDB_NAME_MAX, RSTRING_PTR(name), RSTRING_LEN(name));
        else
            memset(s->name, 0, SDB_NAME_MAX);
        sdb_slot_unlock(s);
    }
}

/* In a fork child: drop the parent's registry (unmap, never unlink) and publish our own, with
 * the forking thread as the main thread: the spare the parent had ready (sdb_spare_claim), else a
 * file made here. The parent checked the layout and found the symbol table (same Ruby, same
 * memory: libruby's data is where it was; scanning it again cost a child ~1 ms). Nothing here
 * allocates: see sdb_slots_alloc. NULL or a reason (in `why`). */
const char *
sdb_after_fork_child(char *why, size_t cap)
{
    const char *reason;
    int was_enabled = sdb.enabled;
    pid_t pid;
    uint64_t ticks;
    VALUE th;
    sdb.nchildren = 0;     /* the parent's children are not ours */
    if (!sdb.hdr) return NULL;
    sdb.enabled = 0;
    munmap(sdb.map, sdb.map_size);
    sdb.map = NULL;
    sdb.hdr = NULL;
    sdb.slots = NULL;
    sdb.path[0] = 0;
    if (!was_enabled) {
        sdb_spare_drop();
        return NULL;
    }
    pid = getpid();
    ticks = sdb_child_start_ticks();
    sdb_slots_reset();
    if (sdb_spare.map && !sdb_spare.lent_to && sdb_spare_claim(pid, ticks) == 0) return NULL;
    sdb_spare_drop();
    if ((reason = sdb_file_create(pid, ticks, why, cap)) != NULL) return reason;
    sdb_copy_cstr(sdb.hdr->layout_name, sizeof(sdb.hdr->layout_name), sdb.layout_name, strlen(sdb.layout_name));
    memcpy(&sdb.hdr->layout, &sdb.layout, sizeof(sdb.layout));
    sdb.enabled = 1;
    __atomic_store_n(&sdb.hdr->status, SDB_STATUS_ENABLED, __ATOMIC_RELEASE);
    /* the thread that forked is the child's only one: its tid is the child's pid */
    th = rb_thread_current();
    sdb_slot_register(th, (uint32_t)pid, sdb_thread_name(th), SDB_SLOT_MAIN | SDB_SLOT_ADOPTED, 1);
    return NULL;
}

/* exec keeps our pid and start ticks, so a file left behind would describe a process that is no
 * longer Ruby: unlink it first. From a non-main Ractor (which runs beside the main one, whose
 * fork may be using the spare) only that: the spare stays as it is. */
void
sdb_before_exec(int main_ractor)
{
    if (getpid() != sdb.pid) return;
    if (sdb.hdr && sdb.path[0]) unlink(sdb.path);
    if (main_ractor && sdb_spare.map) { /* a new spare is made at the next fork, if exec fails */
        if (!sdb_spare.lent_to) unlink(sdb_spare.path);
        sdb_spare_drop();
    }
}

/* exec returned (raised): we are still this Ruby: publish the registry again under the same
 * path, contents unchanged. */
void
sdb_after_failed_exec(void)
{
    int fd;
    void *map;
    if (!sdb.hdr || !sdb.path[0] || getpid() != sdb.pid) return;
    fd = open(sdb.path, O_CREAT | O_EXCL | O_NOFOLLOW | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) return;
    /* The new file gets the registry's bytes, then replaces the old mapping at the very same
     * address (MAP_FIXED swaps it atomically): the GVL hooks of other threads hold pointers
     * into it and must never see it unmapped. A hook store between the copy and the swap is
     * lost (a thread state, renewed at its next GVL event). */
    if (fchmod(fd, 0600) != 0 || ftruncate(fd, (off_t)sdb.map_size) != 0 ||
        pwrite(fd, sdb.map, sdb.map_size, 0) != (ssize_t)sdb.map_size ||
        (map = mmap(sdb.map, sdb.map_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0)) == MAP_FAILED) {
        close(fd);
        unlink(sdb.path);
        return;
    }
    close(fd);
}
