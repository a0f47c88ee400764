/**********************************************************************
 * sdb_gem.h - what the gem's C units share: the one state struct, the
 * thread-local slot cache, and the functions one unit calls in another.
 * The units: sdb_file.c (the registry file and the fork spare),
 * sdb_check.c (the layout check and what it proves), sdb_threads.c (slots
 * and thread lifecycle: the hooks, some run without the GVL), sdb_methods.c
 * (the methods sdb takes over; units of work), sdb.c (the entry points).
 *
 * The sdb thread registry, inside the Ruby process:
 *
 * At require, publishes /dev/shm/sdb-<pid> (layout: sdb_registry.h) for
 * the sdb sidecar: a header naming this Ruby's memory layout (one row of
 * sdb_layouts.h, checked here against rb_profile_frames) and one slot per
 * live Ruby thread (its rb_thread_t*, &th->ec, tid, name). The sidecar
 * reads it lock-free; every slot write goes through a seqlock.
 *
 * Threading: every entry point below runs with the GVL held, except
 * sdb_thread_event (Ruby >= 3.2 internal thread hook), which may only
 * store a thread's state and mark a slot dead with plain stores. Thread
 * lifecycle is C: a THREAD_BEGIN/END event hook, and C functions in the
 * place of Thread#name=, Process._fork and exec. At fork the child claims
 * the spare registry its parent made ready (sdb_spare_*).
 **********************************************************************/
#ifndef SDB_GEM_H
#define SDB_GEM_H 1
#define _GNU_SOURCE 1
#include <ruby.h>
#include <ruby/debug.h>
#include <ruby/version.h>
#ifdef HAVE_RUBY_THREAD_H
#include <ruby/thread.h>
#endif
#include <ruby/ractor.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <pthread.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "sdb_registry.h"
#include "sdb_layouts.h"

#define SDB_MAX_SLOTS 65536
#define SDB_CHECK_FRAMES 2048
#define SDB_PATH_CAP 1024
#define SDB_STALE_SCAN_MAX 4096 /* directory entries looked at for stale registries, at most */
#define SDB_CHILDREN_MAX 1024   /* fork children followed at once (sdb_sweep_children) */

/* Ruby >= 3.3 names the thread in its thread event hooks (event_data->thread): the EXITED hook
 * finds the thread's slot by its rb_thread_t and M:N threads are followed. Before that (3.1, 3.2)
 * a thread that ends by an exception or a kill is found dead by the next sweep, through its
 * th->status byte, so its Thread object is kept (marked) until then. */
#if defined(HAVE_RB_INTERNAL_THREAD_ADD_EVENT_HOOK) && \
    (RUBY_API_VERSION_MAJOR > 3 || (RUBY_API_VERSION_MAJOR == 3 && RUBY_API_VERSION_MINOR >= 3))
#define SDB_HOOK_NAMES_THREAD 1
#else
#define SDB_HOOK_NAMES_THREAD 0
#endif

_Static_assert(sizeof(struct sdb_slot) == 192, "sdb_slot is 192 bytes");
_Static_assert(sizeof(struct sdb_span_event) == 128, "sdb_span_event is 128 bytes");
_Static_assert((SDB_SPAN_EVENTS & (SDB_SPAN_EVENTS - 1)) == 0, "the span ring is a power of two");
_Static_assert(sizeof(struct sdb_layout) % 8 == 0, "sdb_layout is 8-byte sized");

typedef VALUE (*sdb_cfunc_t)(ANYARGS);

/* A typed data object's pointer; 3.3+ may embed the data in the object (RUBY_TYPED_EMBEDDABLE) */
#if RUBY_API_VERSION_MAJOR > 3 || (RUBY_API_VERSION_MAJOR == 3 && RUBY_API_VERSION_MINOR >= 3)
#define SDB_TYPED_DATA(obj) RTYPEDDATA_GET_DATA(obj)
#else
#define SDB_TYPED_DATA(obj) RTYPEDDATA_DATA(obj)
#endif

struct sdb_state {
    void *map;
    size_t map_size;
    struct sdb_header *hdr;
    struct sdb_slot *slots;
    uint32_t slot_count;
    uint32_t *free_stack; /* slots given back, below hiwater; top at free_top - 1 */
    uint32_t free_top;
    uint8_t *used;        /* 1 while a slot is handed out (C's view; read by the EXITED hook) */
    uint32_t hiwater;     /* no slot at or above this index was ever handed out: the next new one */
    uint32_t dead_pending; /* slots the EXITED hook marked dead since the last sweep */
    uint64_t registrations; /* bumped at every registration (the GVL hook's negative cache) */
    VALUE *threads;       /* slot index -> Thread, marked by sdb_threads_mark (before 3.3 only) */
    VALUE threads_holder; /* the hidden object whose mark function marks them */
    VALUE strings;        /* Hash: endpoint String -> its id in the registry's string table */
    struct sdb_span_event *spans; /* the span ring in the mapping */
    char *strings_base;   /* the string table in the mapping */
    uint64_t next_span;   /* the next span's serial */
    uint64_t next_serial;
    int warned_full;
    int enabled;
    int end_proc_set;
    int hooked;           /* thread TracePoints, event hooks and the C methods are in place */
    pid_t pid;
    pid_t children[SDB_CHILDREN_MAX]; /* fork children whose registries we remove when they are gone */
    uint32_t nchildren;
    struct sdb_layout layout;
    char layout_name[16]; /* the row in use (a fork child publishes the same) */
    char ruby_version[32], ruby_description[160]; /* for the header (a fork child's too) */
    char service_name[SDB_SERVICE_MAX]; /* for the header (a fork child's too): read at require */
    char path[64];
    uint64_t fork_boot_ns; /* CLOCK_BOOTTIME just before the last fork (sdb_child_start_ticks) */
    long clk_tck;          /* sysconf(_SC_CLK_TCK): the unit of /proc/<pid>/stat's starttime */
    /* Ruby's own C functions of the methods whose entries sdb replaces by C functions of the same
     * name, class and arity (no Ruby frame, no prepend): they are called first, unchanged. */
    sdb_cfunc_t orig_name_set, orig_fork, orig_exec_kernel, orig_exec_kernel_s, orig_exec_process;
    /* Thread#native_thread_id and Thread#name, called directly by the thread-begin hook (no method
     * dispatch); NULL: not found, rb_funcall then */
    sdb_cfunc_t orig_native_thread_id, orig_thread_name;
};
extern struct sdb_state sdb;

extern ID sdb_id_alive_p, sdb_id_name, sdb_id_warn, sdb_id_native_thread_id;

/* This native thread's slot, set when the thread registers (or is the current thread when
 * adopted): the hooks find it with no search. The serial tells a slot since reused by another
 * thread; thread_addr tells, on 3.3+, a native thread that now runs another Ruby thread (M:N). */
/* initial-exec: one %fs-relative load per access. The default model for a shared object calls
 * __tls_get_addr at each access, and the thread hooks run several times per GVL hand-off (32
 * bytes of static TLS: within the surplus glibc keeps for libraries loaded later). */
#define SDB_TLS __thread __attribute__((tls_model("initial-exec")))
extern SDB_TLS struct sdb_slot *sdb_tls_slot;
extern SDB_TLS uint64_t sdb_tls_serial;
extern SDB_TLS uint64_t sdb_tls_thread;   /* rb_thread_t* this cache is about */
#if SDB_HOOK_NAMES_THREAD
extern SDB_TLS uint64_t sdb_tls_regs;     /* sdb.registrations when a search found no slot */
#endif

static inline void
sdb_tls_set(struct sdb_slot *s)
{
    sdb_tls_slot = s;
    sdb_tls_serial = s ? s->serial : 0;
    sdb_tls_thread = s ? s->thread_addr : 0;
}

#define SDB_INTERNAL __attribute__((visibility("hidden")))

/* the fork spare (sdb_file.c): a registry made ready for the next fork child */
struct sdb_spare_state {
    void *map;       /* NULL: none */
    uint64_t ino, dev;
    pid_t lent_to;   /* 0: ready under `path`; else the child that got it at fork */
    uint32_t seq;    /* names the next spare */
    char path[96];   /* /dev/shm/.sdb-spare-<pid>-<n> */
};
SDB_INTERNAL extern struct sdb_spare_state sdb_spare;

/* Each unit's functions the others call (hidden: only Init_sdb_ext leaves the library) */
/* sdb_file.c: the registry file, the fork spare, small helpers */
SDB_INTERNAL void sdb_at_exit(VALUE unused);
SDB_INTERNAL uint64_t sdb_child_start_ticks(void);
SDB_INTERNAL VALUE sdb_const_str(const char *name);
SDB_INTERNAL void sdb_copy_cstr(char *dst, size_t cap, const char *src, size_t len);
SDB_INTERNAL void sdb_disable(const char *reason);
SDB_INTERNAL const char * sdb_file_create(pid_t pid, uint64_t start_ticks, char *why, size_t cap);
SDB_INTERNAL void sdb_follow_child(pid_t pid);
SDB_INTERNAL uint32_t sdb_gettid(void);
SDB_INTERNAL uint64_t sdb_now_ns(clockid_t clock);
SDB_INTERNAL uint64_t sdb_proc_start_ticks(void);
SDB_INTERNAL int sdb_read(uint64_t addr, void *out, size_t len);
SDB_INTERNAL int sdb_read_u64(uint64_t addr, uint64_t *out);
SDB_INTERNAL void sdb_remove_stale_registries(void);
SDB_INTERNAL uint32_t sdb_slot_count_from_env(void);
SDB_INTERNAL void sdb_slot_lock(struct sdb_slot *s);
SDB_INTERNAL void sdb_slot_unlock(struct sdb_slot *s);
SDB_INTERNAL void sdb_slots_alloc(uint32_t count);
SDB_INTERNAL void sdb_slots_reset(void);
SDB_INTERNAL int sdb_spare_claim(pid_t pid, uint64_t start_ticks);
SDB_INTERNAL void sdb_spare_drop(void);
SDB_INTERNAL void sdb_spare_ready(void);
SDB_INTERNAL void sdb_sweep_children(int take_back);
SDB_INTERNAL void sdb_warn(const char *msg);

/* sdb.c: which Ractor runs the caller (the gem's state belongs to the main Ractor) */
SDB_INTERNAL int sdb_in_main_ractor(void);

/* sdb_check.c: the layout check and the facts it proves */
SDB_INTERNAL void sdb_check_classes(struct sdb_layout *L, VALUE mod);
SDB_INTERNAL int sdb_check_layout(const struct sdb_layout *L, char *why, size_t cap);
SDB_INTERNAL void sdb_check_link(struct sdb_layout *L);
SDB_INTERNAL void sdb_corrupt_for_tests(struct sdb_layout *L);
SDB_INTERNAL void sdb_find_gc_words(struct sdb_layout *L);
SDB_INTERNAL uint64_t sdb_find_global_symbols(const struct sdb_layout *L);
SDB_INTERNAL void sdb_hook_gc(void);
SDB_INTERNAL const struct sdb_layout_row * sdb_pick_row(const char *name);

/* sdb_threads.c: slots and thread lifecycle */
SDB_INTERNAL void sdb_adopt_running_threads(void);
SDB_INTERNAL void sdb_after_failed_exec(void);
SDB_INTERNAL const char * sdb_after_fork_child(char *why, size_t cap);
SDB_INTERNAL void sdb_before_exec(int main_ractor);
SDB_INTERNAL struct sdb_slot * sdb_slot_of(uint64_t th);
SDB_INTERNAL int sdb_slot_register(VALUE thread, uint32_t tid, VALUE name, uint32_t flags, int current);
SDB_INTERNAL void sdb_slot_rename(uint64_t th, VALUE name);
SDB_INTERNAL void sdb_thread_event_hook(rb_event_flag_t ev, VALUE data, VALUE self, ID mid, VALUE klass);
SDB_INTERNAL VALUE sdb_thread_name(VALUE thread);
SDB_INTERNAL uint64_t sdb_thread_ptr(VALUE thread);
SDB_INTERNAL extern const rb_data_type_t sdb_threads_type;
#if defined(HAVE_RB_INTERNAL_THREAD_ADD_EVENT_HOOK)
SDB_INTERNAL void sdb_thread_event(rb_event_flag_t event, const rb_internal_thread_event_data_t *data, void *arg);
#endif

/* sdb_methods.c: the methods sdb takes over, units of work */
SDB_INTERNAL VALUE sdb_spans_close(VALUE self, VALUE span, VALUE parent, VALUE endpoint, VALUE request_id, VALUE status);
SDB_INTERNAL VALUE sdb_spans_current(VALUE self);
SDB_INTERNAL VALUE sdb_spans_open(int argc, VALUE *argv, VALUE self);
SDB_INTERNAL VALUE sdb_spans_trace_ids(int argc, VALUE *argv, VALUE self);
SDB_INTERNAL const char * sdb_take_over_methods(void);

#endif /* SDB_GEM_H */
