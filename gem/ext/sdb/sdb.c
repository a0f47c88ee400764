/**********************************************************************
 * sdb.c - the sdb thread registry, inside the Ruby process.
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
#define _GNU_SOURCE 1
#include <ruby.h>
#include <ruby/debug.h>
#include <ruby/version.h>
#ifdef HAVE_RUBY_THREAD_H
#include <ruby/thread.h>
#endif
#include <dirent.h>
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
#define SDB_THREAD_KILLED 3 /* enum rb_thread_status: RUNNABLE, STOPPED, STOPPED_FOREVER, KILLED */

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

static struct {
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
    char path[64];
    uint64_t fork_boot_ns; /* CLOCK_BOOTTIME just before the last fork (sdb_child_start_ticks) */
    long clk_tck;          /* sysconf(_SC_CLK_TCK): the unit of /proc/<pid>/stat's starttime */
    /* Ruby's own C functions of the methods whose entries sdb replaces by C functions of the same
     * name, class and arity (no Ruby frame, no prepend): they are called first, unchanged. */
    sdb_cfunc_t orig_name_set, orig_fork, orig_exec_kernel, orig_exec_kernel_s, orig_exec_process;
    /* Thread#native_thread_id and Thread#name, called directly by the thread-begin hook (no method
     * dispatch); NULL: not found, rb_funcall then */
    sdb_cfunc_t orig_native_thread_id, orig_thread_name;
} sdb;

static ID sdb_id_alive_p, sdb_id_name, sdb_id_warn, sdb_id_native_thread_id;

/* This native thread's slot, set when the thread registers (or is the current thread when
 * adopted): the hooks find it with no search. The serial tells a slot since reused by another
 * thread; thread_addr tells, on 3.3+, a native thread that now runs another Ruby thread (M:N). */
/* initial-exec: one %fs-relative load per access. The default model for a shared object calls
 * __tls_get_addr at each access, and the thread hooks run several times per GVL hand-off (32
 * bytes of static TLS: within the surplus glibc keeps for libraries loaded later). */
#define SDB_TLS __thread __attribute__((tls_model("initial-exec")))
static SDB_TLS struct sdb_slot *sdb_tls_slot;
static SDB_TLS uint64_t sdb_tls_serial;
static SDB_TLS uint64_t sdb_tls_thread;   /* rb_thread_t* this cache is about */
#if SDB_HOOK_NAMES_THREAD
static SDB_TLS uint64_t sdb_tls_regs;     /* sdb.registrations when a search found no slot */
#endif

static void
sdb_tls_set(struct sdb_slot *s)
{
    sdb_tls_slot = s;
    sdb_tls_serial = s ? s->serial : 0;
    sdb_tls_thread = s ? s->thread_addr : 0;
}

static int sdb_slot_register(VALUE thread, uint32_t tid, VALUE name, uint32_t flags, int current);
static VALUE sdb_thread_name(VALUE thread);

/* fork: the child's only thread must not keep a pointer into the parent's mapping */
static void
sdb_tls_atfork_child(void)
{
    sdb_tls_set(NULL);
}

/* ---------- small helpers ---------- */

static uint64_t
sdb_now_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint32_t
sdb_gettid(void)
{
    return (uint32_t)syscall(SYS_gettid);
}

static void
sdb_copy_cstr(char *dst, size_t cap, const char *src, size_t len)
{
    if (len > cap - 1) len = cap - 1;
    if (len == cap - 1) { /* do not cut a UTF-8 sequence in half */
        while (len > 0 && ((unsigned char)src[len] & 0xc0) == 0x80) len--;
    }
    memcpy(dst, src, len);
    memset(dst + len, 0, cap - len);
}

static void
sdb_warn(const char *msg)
{
    rb_funcall(rb_mKernel, sdb_id_warn, 1, rb_str_new_cstr(msg));
}

/* Fault-safe read of our own memory: EFAULT instead of SIGSEGV. */
static int
sdb_read(uint64_t addr, void *out, size_t len)
{
    struct iovec local = { out, len };
    struct iovec remote = { (void *)(uintptr_t)addr, len };
    if (addr == 0) return -1;
    return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == (ssize_t)len ? 0 : -1;
}

static int
sdb_read_u64(uint64_t addr, uint64_t *out)
{
    return sdb_read(addr, out, sizeof(*out));
}

/* ---------- seqlock (writer side) ---------- */

static void
sdb_slot_lock(struct sdb_slot *s)
{
    int spins = 0;
    for (;;) {
        uint64_t g = __atomic_load_n(&s->gen, __ATOMIC_ACQUIRE);
        if (!(g & 1) &&
            __atomic_compare_exchange_n(&s->gen, &g, g + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            break;
        /* only the thread-exit hook can hold it, for a few stores */
        if (++spins > 1000) sched_yield();
    }
    __atomic_thread_fence(__ATOMIC_RELEASE);
}

static void
sdb_slot_unlock(struct sdb_slot *s)
{
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n(&s->gen, s->gen + 1, __ATOMIC_RELEASE);
    __atomic_fetch_add(&sdb.hdr->gen, 1, __ATOMIC_RELEASE);
}

/* ---------- the file ---------- */

static uint64_t
sdb_proc_start_ticks_of(const char *stat_path)
{
    char buf[1024];
    ssize_t n;
    int fd = open(stat_path, O_RDONLY | O_CLOEXEC);
    char *p, *save = NULL;
    int field;
    if (fd < 0) return 0;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    p = strrchr(buf, ')'); /* comm may hold spaces and parens */
    if (!p) return 0;
    p++;
    /* after ")" comes field 3 (state); we want field 22 (starttime) */
    for (field = 3, p = strtok_r(p, " ", &save); p; p = strtok_r(NULL, " ", &save), field++) {
        if (field == 22) return strtoull(p, NULL, 10);
    }
    return 0;
}

static uint64_t
sdb_proc_start_ticks(void)
{
    return sdb_proc_start_ticks_of("/proc/self/stat");
}

/* A fork child's start ticks without reading /proc/self/stat (open, read, close, and the kernel
 * formatting 52 fields). The kernel stamps a new process with CLOCK_BOOTTIME in fork
 * (copy_process: start_boottime) and /proc/<pid>/stat shows it in clock ticks, rounded down
 * (fs/proc/array.c: nsec_to_clock_t). The parent read CLOCK_BOOTTIME just before it forked, the
 * child reads it now: the stamp lies between the two, so when both fall in the same tick, that
 * tick is the start time. Otherwise (a tick boundary within the fork, or a tick that does not
 * divide a second) the file is read. */
static uint64_t
sdb_child_start_ticks(void)
{
    uint64_t before = sdb.fork_boot_ns, now = sdb_now_ns(CLOCK_BOOTTIME), per;
    if (sdb.clk_tck > 0 && 1000000000L % sdb.clk_tck == 0 && before && before <= now) {
        per = 1000000000ull / (uint64_t)sdb.clk_tck;
        if (before / per == now / per) return now / per;
    }
    return sdb_proc_start_ticks();
}

/* The registry `name` (sdb-<pid>) in the directory dfd, removed if stale: a regular file of ours
 * with the registry magic whose pid is no process, or a process started at another time than the
 * one that wrote it (the pid was reused); a live writer's file, another user's, or anything else is
 * left alone. The file is first renamed aside and removed only if it is still the very file that
 * was checked (a new process with that pid may have just made its own). */
static void
sdb_remove_if_stale(int dfd, const char *dir, const char *name, long pid, pid_t self)
{
    char aside[128], stat_path[64];
    int fd;
    struct stat st, st2;
    struct sdb_header h;
    fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() || st.st_size < (off_t)sizeof(h) ||
        pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) || memcmp(h.magic, SDB_REGISTRY_MAGIC, 8) != 0 ||
        (long)h.pid != pid) {
        close(fd);
        return;
    }
    close(fd);
    if (kill((pid_t)pid, 0) == 0 || errno == EPERM) {
        uint64_t ticks;
        snprintf(stat_path, sizeof(stat_path), "/proc/%ld/stat", pid);
        ticks = sdb_proc_start_ticks_of(stat_path);
        if (!ticks || !h.proc_start_ticks || ticks == h.proc_start_ticks) return; /* its writer lives */
    }
    snprintf(aside, sizeof(aside), "%s.sdb-stale-%d-%ld", dir, (int)self, pid);
    if (renameat(dfd, name, dfd, aside) != 0) return;
    if (fstatat(dfd, aside, &st2, AT_SYMLINK_NOFOLLOW) == 0 && st2.st_ino == st.st_ino && st2.st_dev == st.st_dev)
        unlinkat(dfd, aside, 0);
    else
        renameat2(dfd, aside, dfd, name, RENAME_NOREPLACE); /* not the file checked: put it back */
}

/* Registries of dead processes (exit!, SIGKILL, a crash leave theirs behind) of this user:
 * removed when stale (sdb_remove_if_stale). At most SDB_STALE_SCAN_MAX entries. */
static void
sdb_remove_stale_registries(void)
{
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    int seen = 0;
    if (!d) return;
    while ((e = readdir(d)) != NULL && seen++ < SDB_STALE_SCAN_MAX) {
        char *end;
        long pid;
        if (strncmp(e->d_name, "sdb-", 4) == 0) {
            errno = 0;
            pid = strtol(e->d_name + 4, &end, 10);
            if (errno || *end || pid <= 0 || pid > INT_MAX || pid == (long)getpid()) continue;
        }
        else if (strncmp(e->d_name, ".sdb-spare-", 11) == 0) { /* .sdb-spare-<pid>-<n>: a spare's header names its maker */
            errno = 0;
            pid = strtol(e->d_name + 11, &end, 10);
            if (errno || *end != '-' || pid <= 0 || pid > INT_MAX) continue;
        }
        else {
            continue;
        }
        sdb_remove_if_stale(dirfd(d), "", e->d_name, pid, getpid());
    }
    closedir(d);
}

static uint32_t
sdb_slot_count_from_env(void)
{
    const char *e = getenv("SDB_MAX_THREADS");
    long n;
    if (!e || !*e) return SDB_DEFAULT_SLOTS;
    n = strtol(e, NULL, 10);
    if (n < 1 || n > SDB_MAX_SLOTS) return SDB_DEFAULT_SLOTS;
    return (uint32_t)n;
}

static VALUE
sdb_const_str(const char *name)
{
    VALUE v = rb_const_get(rb_cObject, rb_intern(name));
    return RB_TYPE_P(v, T_STRING) ? v : rb_str_new_cstr("");
}

/* The slot bookkeeping on the C side: a stack of the slots given back (free_stack) and, above the
 * high-water mark, slots never handed out. Allocated once, at require; a fork child resets it in
 * place (sdb_slots_reset) and allocates nothing: a large malloc makes glibc consolidate its
 * fastbins, a write to every page they lie on, each a copy-on-write fault in a fork child. */
static void
sdb_slots_alloc(uint32_t count)
{
    sdb.free_stack = ALLOC_N(uint32_t, count);
    sdb.used = ZALLOC_N(uint8_t, count);
#if !SDB_HOOK_NAMES_THREAD
    sdb.threads = ZALLOC_N(VALUE, count);
#endif
    sdb.slot_count = count;
    sdb.free_top = 0;
    sdb.hiwater = 0;
    sdb.dead_pending = 0;
}

/* A fork child: none of the parent's slots is handed out (its only thread registers anew). */
static void
sdb_slots_reset(void)
{
    memset(sdb.used, 0, sdb.hiwater);
#if !SDB_HOOK_NAMES_THREAD
    memset(sdb.threads, 0, sdb.hiwater * sizeof(VALUE));
#endif
    sdb.free_top = 0;
    sdb.hiwater = 0;
    sdb.dead_pending = 0;
}

/* Where the parts of a registry of sdb.slot_count slots lie, and its size. */
struct sdb_geometry {
    uint32_t slots_offset;
    size_t spans_offset, strings_offset, size;
};

static struct sdb_geometry
sdb_geometry(void)
{
    struct sdb_geometry g;
    g.slots_offset = (uint32_t)((sizeof(struct sdb_header) + 63) & ~(size_t)63);
    g.spans_offset = ((size_t)g.slots_offset + (size_t)sdb.slot_count * sizeof(struct sdb_slot) + 63) & ~(size_t)63;
    g.strings_offset = g.spans_offset + (size_t)SDB_SPAN_EVENTS * sizeof(struct sdb_span_event);
    g.size = g.strings_offset + SDB_STRINGS_SIZE;
    return g;
}

/* Fills a zeroed header for process `pid` (status STARTING). The layout comes later (sdb_open
 * checks it; a fork child and a spare get the parent's). */
static void
sdb_header_init(struct sdb_header *h, pid_t pid, uint64_t start_ticks)
{
    struct sdb_geometry g = sdb_geometry();
    memcpy(h->magic, SDB_REGISTRY_MAGIC, 8);
    h->version = SDB_REGISTRY_VERSION;
    h->header_size = sizeof(struct sdb_header);
    h->slot_size = sizeof(struct sdb_slot);
    h->slot_count = sdb.slot_count;
    h->slots_offset = g.slots_offset;
    h->pid = (uint32_t)pid;
    h->status = SDB_STATUS_STARTING;
    h->proc_start_ticks = start_ticks;
    h->created_mono_ns = sdb_now_ns(CLOCK_MONOTONIC);
    h->spans_offset = (uint32_t)g.spans_offset;
    h->span_count = SDB_SPAN_EVENTS;
    h->strings_offset = (uint32_t)g.strings_offset;
    h->strings_size = SDB_STRINGS_SIZE;
    memcpy(h->ruby_version, sdb.ruby_version, sizeof(h->ruby_version));
    memcpy(h->ruby_description, sdb.ruby_description, sizeof(h->ruby_description));
}

/* Creates `path` (O_EXCL, 0600), sizes and maps it. No fd is kept: the mapping holds the file.
 * The mapping, or NULL with errno set; *ino and *dev when asked (an fstat more). */
static void *
sdb_map_new(const char *path, size_t size, uint64_t *ino, uint64_t *dev)
{
    struct stat st;
    void *map = MAP_FAILED;
    int fd = open(path, O_CREAT | O_EXCL | O_NOFOLLOW | O_RDWR | O_CLOEXEC, 0600), err;
    if (fd < 0) return NULL;
    if (fchmod(fd, 0600) != 0 || ftruncate(fd, (off_t)size) != 0 || (ino && fstat(fd, &st) != 0) ||
        (map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
        err = errno;
        close(fd);
        unlink(path);
        errno = err;
        return NULL;
    }
    close(fd);
    if (ino) {
        *ino = (uint64_t)st.st_ino;
        *dev = (uint64_t)st.st_dev;
    }
    return map;
}

/* Makes `map` (a registry mapped here) this process's registry, /dev/shm/sdb-<pid>. */
static void
sdb_use_map(void *map, pid_t pid)
{
    struct sdb_geometry g = sdb_geometry();
    sdb.pid = pid;
    snprintf(sdb.path, sizeof(sdb.path), "%s%d", SDB_REGISTRY_PREFIX, (int)pid);
    sdb.map = map;
    sdb.map_size = g.size;
    sdb.hdr = (struct sdb_header *)map;
    sdb.slots = (struct sdb_slot *)((char *)map + g.slots_offset);
    sdb.next_serial = 1;
    sdb.warned_full = 0;
    sdb.spans = (struct sdb_span_event *)((char *)map + g.spans_offset);
    sdb.strings_base = (char *)map + g.strings_offset;
    sdb.next_span = 1;
    if (RHASH_SIZE(sdb.strings)) rb_hash_clear(sdb.strings); /* a fork child's table starts empty */
}

/* Creates /dev/shm/sdb-<pid> for `pid` (this process), sized for sdb.slot_count slots, and fills
 * the header (status STARTING). Returns NULL or a reason (in `why`). */
static const char *
sdb_file_create(pid_t pid, uint64_t start_ticks, char *why, size_t cap)
{
    struct sdb_geometry g = sdb_geometry();
    char path[64];
    void *map;
    snprintf(path, sizeof(path), "%s%d", SDB_REGISTRY_PREFIX, (int)pid);
    if (!(map = sdb_map_new(path, g.size, NULL, NULL)) && errno == EEXIST) {
        unlink(path); /* stale file of an earlier process with our pid */
        map = sdb_map_new(path, g.size, NULL, NULL);
    }
    if (!map) {
        snprintf(why, cap, "cannot create %s (%s); profiling disabled (is /dev/shm mounted and writable?)",
                 path, strerror(errno));
        sdb.path[0] = 0;
        return why;
    }
    sdb_use_map(map, pid);
    sdb_header_init(sdb.hdr, pid, start_ticks);
    return NULL;
}

/* ---------- the spare: a fork child's registry, made ready by the parent ----------
 * A child must publish /dev/shm/sdb-<its pid> at once (a sidecar following the process tree
 * looks for it, and attaches from the child's first moments). Creating, sizing and mapping a
 * file there, and removing it once the child is gone, cost the child and the parent ~60 us a
 * fork. So the parent keeps one spare registry ready, mapped and with its header filled
 * (/dev/shm/.sdb-spare-<pid>-<n>, its own pid and start ticks: stale by the same rule as a
 * registry). A fork child inherits the mapping: it writes its pid, start ticks and main thread
 * into it, then renames it to sdb-<its pid>: the file appears whole. The parent lends it at
 * that fork and keeps it mapped; once that child is gone (reaped: kill says ESRCH), the parent
 * renames the file back to a spare name, checks it is still the very file it made (inode), and
 * empties it (MADV_REMOVE punches the pages out; the header page is rewritten): a fork-per-job
 * loop makes and removes no file at all. A child that ended by a normal exit removed its file:
 * the parent then drops the mapping and makes a new spare before the next fork; so it does when
 * the lent child still lives at the next fork (puma's workers): that child's file is then
 * removed the old way once it is gone (sdb_sweep_children). */
static struct {
    void *map;       /* NULL: none */
    uint64_t ino, dev;
    pid_t lent_to;   /* 0: ready under `path`; else the child that got it at fork */
    uint32_t seq;    /* names the next spare */
    char path[96];   /* /dev/shm/.sdb-spare-<pid>-<n> */
} sdb_spare;

#define SDB_SPARE_PREFIX "/dev/shm/.sdb-spare-"

static void
sdb_spare_name(void)
{
    snprintf(sdb_spare.path, sizeof(sdb_spare.path), "%s%d-%u", SDB_SPARE_PREFIX, (int)sdb.pid, sdb_spare.seq++);
}

/* The header of a spare: this (the parent) process's pid and start ticks until a child claims it,
 * the checked layout. */
static void
sdb_spare_fill(void)
{
    struct sdb_header *h = (struct sdb_header *)sdb_spare.map;
    sdb_header_init(h, sdb.pid, sdb.hdr->proc_start_ticks);
    sdb_copy_cstr(h->layout_name, sizeof(h->layout_name), sdb.layout_name, strlen(sdb.layout_name));
    memcpy(&h->layout, &sdb.layout, sizeof(sdb.layout));
}

static void
sdb_spare_drop(void)
{
    if (sdb_spare.map) munmap(sdb_spare.map, sdb.map_size);
    sdb_spare.map = NULL;
    sdb_spare.lent_to = 0;
}

/* Before a fork: a spare ready to lend, made if none is (or the last one is still lent to a
 * live child). Nothing on failure: the child then makes its own registry. */
static void
sdb_spare_ready(void)
{
    if (sdb_spare.map && !sdb_spare.lent_to) return;
    sdb_spare_drop();
    sdb_spare_name();
    if (!(sdb_spare.map = sdb_map_new(sdb_spare.path, sdb.map_size, &sdb_spare.ino, &sdb_spare.dev))) return;
    sdb_spare_fill();
}

/* The child the spare was lent to is gone: take its file back as the spare, emptied. */
static void
sdb_spare_take_back(void)
{
    char child[48], old[96];
    struct stat st;
    long page = sysconf(_SC_PAGESIZE);
    snprintf(child, sizeof(child), "%s%d", SDB_REGISTRY_PREFIX, (int)sdb_spare.lent_to);
    memcpy(old, sdb_spare.path, sizeof(old));
    sdb_spare_name();
    if (renameat2(AT_FDCWD, child, AT_FDCWD, sdb_spare.path, RENAME_NOREPLACE) != 0) {
        /* never claimed (the child ended first) and still ours, or removed by the child's exit */
        if (errno != ENOENT || fstatat(AT_FDCWD, old, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
            (uint64_t)st.st_ino != sdb_spare.ino || (uint64_t)st.st_dev != sdb_spare.dev ||
            renameat2(AT_FDCWD, old, AT_FDCWD, sdb_spare.path, RENAME_NOREPLACE) != 0) {
            sdb_spare_drop();
            return;
        }
    }
    else if (fstatat(AT_FDCWD, sdb_spare.path, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
             (uint64_t)st.st_ino != sdb_spare.ino || (uint64_t)st.st_dev != sdb_spare.dev) {
        /* not the file lent (a new process with that pid made its own): put it back */
        renameat2(AT_FDCWD, sdb_spare.path, AT_FDCWD, child, RENAME_NOREPLACE);
        sdb_spare_drop();
        return;
    }
    sdb_spare.lent_to = 0;
    if (page <= 0 || (size_t)page >= sdb.map_size ||
        madvise((char *)sdb_spare.map + page, sdb.map_size - (size_t)page, MADV_REMOVE) != 0) {
        unlink(sdb_spare.path);
        sdb_spare_drop();
        return;
    }
    memset(sdb_spare.map, 0, (size_t)page);
    sdb_spare_fill();
}

/* In a fork child: the spare the parent had ready is ours. The header and the main thread are
 * written before the file takes our name, so it appears whole. 0, or -1 (the caller makes a
 * registry of its own). */
static int
sdb_spare_claim(pid_t pid, uint64_t start_ticks)
{
    char path[64];
    struct sdb_header *h = (struct sdb_header *)sdb_spare.map;
    VALUE th = rb_thread_current();
    int attempt;
    h->pid = (uint32_t)pid;
    h->proc_start_ticks = start_ticks;
    h->created_mono_ns = sdb_now_ns(CLOCK_MONOTONIC);
    sdb_use_map(sdb_spare.map, pid);
    sdb.enabled = 1;
    __atomic_store_n(&h->status, SDB_STATUS_ENABLED, __ATOMIC_RELEASE);
    sdb_slot_register(th, (uint32_t)pid, sdb_thread_name(th), SDB_SLOT_MAIN | SDB_SLOT_ADOPTED, 1);
    snprintf(path, sizeof(path), "%s%d", SDB_REGISTRY_PREFIX, (int)pid);
    for (attempt = 0; attempt < 2; attempt++) {
        if (renameat2(AT_FDCWD, sdb_spare.path, AT_FDCWD, path, RENAME_NOREPLACE) == 0) {
            sdb_spare.map = NULL; /* it is our registry now; we have no spare */
            return 0;
        }
        if (errno != EEXIST) break;
        unlink(path); /* stale file of an earlier process with our pid */
    }
    sdb.enabled = 0;
    sdb_tls_set(NULL);
    sdb.map = NULL;
    sdb.hdr = NULL;
    sdb.slots = NULL;
    sdb.path[0] = 0;
    sdb_slots_reset();
    unlink(sdb_spare.path);
    sdb_spare_drop();
    return -1;
}

/* Fork children whose registries this process removes once they are gone: a child that ends by
 * exit! (fork-per-job servers: Resque, and many a `fork { ...; exit! }`) or a signal cannot remove
 * its own. Checked before each fork and at exit: kill(pid, 0) says ESRCH once the child was reaped
 * (a zombie keeps its registry until then). The child the spare was lent to gives its file back
 * as the next spare (`take_back`: before a fork). With SDB_CHILDREN_MAX children alive at once, a
 * further one is not followed: the next `require "sdb"` of this user removes its file. */
static void
sdb_sweep_children(int take_back)
{
    uint32_t i, kept = 0;
    for (i = 0; i < sdb.nchildren; i++) {
        pid_t pid = sdb.children[i];
        char name[48];
        if (kill(pid, 0) == 0 || errno != ESRCH) {
            sdb.children[kept++] = pid;
            continue;
        }
        if (take_back && sdb_spare.map && sdb_spare.lent_to == pid) {
            sdb_spare_take_back();
            continue;
        }
        /* by absolute path: no directory to open and close at every fork */
        snprintf(name, sizeof(name), "%s%d", SDB_REGISTRY_PREFIX, (int)pid);
        sdb_remove_if_stale(AT_FDCWD, "/dev/shm/", name, (long)pid, sdb.pid);
    }
    sdb.nchildren = kept;
}

static void
sdb_follow_child(pid_t pid)
{
    if (sdb.nchildren < SDB_CHILDREN_MAX) sdb.children[sdb.nchildren++] = pid;
}

static void
sdb_disable(const char *reason)
{
    sdb.enabled = 0;
    if (!sdb.hdr) return;
    sdb_copy_cstr(sdb.hdr->disabled_reason, sizeof(sdb.hdr->disabled_reason), reason, strlen(reason));
    __atomic_store_n(&sdb.hdr->status, SDB_STATUS_DISABLED, __ATOMIC_RELEASE);
}

static void
sdb_at_exit(VALUE unused)
{
    (void)unused;
    if (getpid() != sdb.pid) return;
    if (sdb.path[0] && sdb.hdr) unlink(sdb.path);
    if (sdb_spare.map) unlink(sdb_spare.path); /* gone already if a child took it */
    sdb_sweep_children(0);
}

/* ---------- the layout check ---------- */

struct sdb_vm_frame {
    uint32_t path_len;
    long first_lineno, local_first_lineno;
    char path[SDB_PATH_CAP];
};

static int
sdb_read_lineno(const struct sdb_layout *L, uint64_t body, long *out)
{
    if (L->body_first_lineno_is_fixnum) {
        uint64_t v;
        if (sdb_read_u64(body + L->body_first_lineno, &v)) return -1;
        *out = (long)((int64_t)v >> 1);
    }
    else {
        int32_t v;
        if (sdb_read(body + L->body_first_lineno, &v, sizeof(v))) return -1;
        *out = v;
    }
    return 0;
}

/* Reads a String's bytes through the layout. */
static int
sdb_read_rstring(const struct sdb_layout *L, uint64_t str, struct sdb_vm_frame *f)
{
    uint64_t flags, len, ptr;
    if (sdb_read_u64(str, &flags) || (flags & 0x1f) != 0x05) return -1;
    if (flags & (1ull << L->rstring_noembed_bit)) {
        if (sdb_read_u64(str + L->rstring_heap_len, &len) || sdb_read_u64(str + L->rstring_heap_ptr, &ptr))
            return -1;
    }
    else {
        if (L->rstring_embed_len != SDB_NA) {
            uint64_t l;
            if (sdb_read_u64(str + L->rstring_embed_len, &l)) return -1;
            len = l;
        }
        else {
            len = (flags >> L->rstring_embed_len_shift) & L->rstring_embed_len_mask;
        }
        ptr = str + L->rstring_embed_ary;
    }
    if (len > (1u << 20)) return -1;
    f->path_len = (uint32_t)len;
    if (len > SDB_PATH_CAP) len = SDB_PATH_CAP;
    return len ? sdb_read(ptr, f->path, len) : 0;
}

/* pathobj: a String, or an Array [path, realpath]. */
static int
sdb_read_pathobj(const struct sdb_layout *L, uint64_t pathobj, struct sdb_vm_frame *f)
{
    uint64_t flags, first;
    if (sdb_read_u64(pathobj, &flags)) return -1;
    if ((flags & 0x1f) == 0x07) {
        uint64_t elts = pathobj + L->rarray_embed_ary;
        if (!(flags & (1ull << L->rarray_embed_bit))) {
            if (sdb_read_u64(pathobj + L->rarray_heap_ptr, &elts)) return -1;
        }
        if (sdb_read_u64(elts, &first)) return -1;
        pathobj = first;
    }
    return sdb_read_rstring(L, pathobj, f);
}

static int
sdb_is_iseq(uint64_t iseq)
{
    uint64_t flags;
    if (sdb_read_u64(iseq, &flags)) return 0;
    return (flags & 0x1f) == 0x1a && ((flags >> 12) & 0xf) == 7;
}

/* Walks this thread's frames through the layout and compares them with
 * rb_profile_frames. 0 = agreed; -1 = refused, reason in `why`. */
static int
sdb_check_layout(const struct sdb_layout *L, char *why, size_t cap)
{
    VALUE buf[SDB_CHECK_FRAMES];
    int lines[SDB_CHECK_FRAMES];
    struct sdb_vm_frame *mine;
    uint64_t th = (uint64_t)(uintptr_t)RTYPEDDATA_DATA(rb_thread_current());
    uint64_t ec, back, cfp, stack, stack_size, end;
    unsigned char cfpbuf[256];
    int n, i, nmine = 0, j = 0, rc = -1, last_is_dummy = 0;

    if (sdb_read_u64(th + L->thread_ec, &ec)) {
        snprintf(why, cap, "cannot read rb_thread_t.ec at +%u (%s)", L->thread_ec, strerror(errno));
        return -1;
    }
    if (sdb_read_u64(ec + L->ec_thread_ptr, &back) || back != th) {
        snprintf(why, cap, "ec->thread_ptr (+%u) does not point back at the thread", L->ec_thread_ptr);
        return -1;
    }
    if (L->thread_status != SDB_NA) {
        uint8_t b;
        if (sdb_read(th + L->thread_status, &b, 1) || ((b >> L->thread_status_shift) & L->thread_status_mask) != 0) {
            snprintf(why, cap, "th->status (byte %u) does not say RUNNABLE for the running thread", L->thread_status);
            return -1;
        }
    }
    if (sdb_read_u64(ec + L->ec_cfp, &cfp) || sdb_read_u64(ec + L->ec_vm_stack, &stack) ||
        sdb_read_u64(ec + L->ec_vm_stack_size, &stack_size)) {
        snprintf(why, cap, "cannot read ec->cfp/vm_stack/vm_stack_size");
        return -1;
    }
    end = stack + stack_size * 8;
    if (L->cfp_size == 0 || L->cfp_size > sizeof(cfpbuf) || stack_size == 0 || stack_size > (1u << 26) ||
        cfp < stack || cfp >= end || (end - cfp) % L->cfp_size != 0) {
        snprintf(why, cap, "ec->cfp is not a control frame inside the VM stack (cfp size %u)", L->cfp_size);
        return -1;
    }

    n = rb_profile_frames(0, SDB_CHECK_FRAMES, buf, lines);
    mine = ALLOC_N(struct sdb_vm_frame, SDB_CHECK_FRAMES);
    /* the outermost frame (end - 1) is Ruby's dummy; on the main thread it holds a real ISeq.
     * rb_profile_frames reports it on 3.1 but not on 3.3+; Thread#backtrace never does (nor
     * does the sidecar). Walk it, and accept Ruby's count with or without it. */
    for (; cfp < end && nmine < SDB_CHECK_FRAMES; cfp += L->cfp_size) {
        uint64_t pc, iseq, body, pathobj, local, lbody;
        struct sdb_vm_frame *f = &mine[nmine];
        if (sdb_read(cfp, cfpbuf, L->cfp_size)) {
            snprintf(why, cap, "cannot read a control frame at 0x%llx", (unsigned long long)cfp);
            goto done;
        }
        memcpy(&pc, cfpbuf + L->cfp_pc, 8);
        memcpy(&iseq, cfpbuf + L->cfp_iseq, 8);
        if (!iseq || !pc || !sdb_is_iseq(iseq)) continue;
        if (sdb_read_u64(iseq + L->iseq_body, &body) || !body) continue;
        if (sdb_read_u64(body + L->body_pathobj, &pathobj) || sdb_read_pathobj(L, pathobj, f) ||
            sdb_read_lineno(L, body, &f->first_lineno)) {
            snprintf(why, cap, "frame %d: cannot read the iseq's path/first_lineno (pathobj +%u)",
                     nmine, L->body_pathobj);
            goto done;
        }
        f->local_first_lineno = f->first_lineno;
        last_is_dummy = (cfp + L->cfp_size == end);
        if (!sdb_read_u64(body + L->body_local_iseq, &local) && local && local != iseq &&
            !sdb_read_u64(local + L->iseq_body, &lbody) && lbody)
            sdb_read_lineno(L, lbody, &f->local_first_lineno);
        nmine++;
    }

    if (getenv("SDB_DEBUG_LAYOUT")) { /* for adding a Ruby version: both views, side by side */
        for (i = 0; i < nmine; i++)
            fprintf(stderr, "sdb: layout frame %d: %.*s first_lineno %ld (local %ld)\n", i,
                    (int)(mine[i].path_len < 200 ? mine[i].path_len : 200), mine[i].path,
                    mine[i].first_lineno, mine[i].local_first_lineno);
        for (i = 0; i < n; i++) {
            VALUE path = rb_profile_frame_path(buf[i]), first = rb_profile_frame_first_lineno(buf[i]);
            VALUE label = rb_profile_frame_full_label(buf[i]);
            fprintf(stderr, "sdb: rb_profile_frames %d: %s %s first_lineno %ld\n", i,
                    RB_TYPE_P(label, T_STRING) ? StringValueCStr(label) : "?",
                    RB_TYPE_P(path, T_STRING) ? StringValueCStr(path) : "(no path)",
                    FIXNUM_P(first) ? FIX2LONG(first) : -1L);
        }
    }
    for (i = 0; i < n; i++) {
        VALUE path = rb_profile_frame_path(buf[i]);
        VALUE first = rb_profile_frame_first_lineno(buf[i]);
        long want_line;
        struct sdb_vm_frame *f;
        if (!RB_TYPE_P(path, T_STRING) || !FIXNUM_P(first)) continue; /* cfunc */
        if (j >= nmine) {
            if (n == SDB_CHECK_FRAMES || nmine == SDB_CHECK_FRAMES) break;
            snprintf(why, cap, "Ruby reports more frames than the layout finds (%d found)", nmine);
            goto done;
        }
        f = &mine[j];
        want_line = FIX2LONG(first);
        if ((long)f->path_len != RSTRING_LEN(path) ||
            memcmp(f->path, RSTRING_PTR(path), f->path_len < SDB_PATH_CAP ? f->path_len : SDB_PATH_CAP)) {
            snprintf(why, cap, "frame %d: path \"%.*s\" read through the layout, Ruby says \"%.*s\"", j,
                     (int)(f->path_len < 60 ? f->path_len : 60), f->path,
                     (int)(RSTRING_LEN(path) < 60 ? RSTRING_LEN(path) : 60), RSTRING_PTR(path));
            goto done;
        }
        /* for a block in a method Ruby names the method: its local iseq */
        if (want_line != f->first_lineno && want_line != f->local_first_lineno) {
            snprintf(why, cap, "frame %d (%.*s): first_lineno %ld read through the layout, Ruby says %ld", j,
                     (int)(f->path_len < 60 ? f->path_len : 60), f->path, f->first_lineno, want_line);
            goto done;
        }
        j++;
    }
    if (i == n && j != nmine && !(last_is_dummy && j == nmine - 1) && n < SDB_CHECK_FRAMES) {
        snprintf(why, cap, "the layout finds %d Ruby frames, Ruby reports %d", nmine, j);
        goto done;
    }
    if (j == 0) {
        snprintf(why, cap, "no Ruby frame found to compare");
        goto done;
    }
    rc = 0;
done:
    xfree(mine);
    return rc;
}

/* ---------- class paths (for the sidecar's method names) ----------
 * The sidecar names a method entry's class from outside: its path where Ruby keeps it (3.3+: a
 * field of the class's rb_classext_t; 3.1: the hidden ivar __classpath__, or __tmp_classpath__,
 * in the class's ivar st_table), and a singleton's attached object (3.3+: a classext field; 3.1:
 * the ivar __attached__). Checked here on the gem's own module and its singleton class, through
 * the same reads the sidecar makes; what does not check out is withdrawn (SDB_NA / 0), so the
 * sidecar names methods without their class rather than wrongly. */
#define SDB_ST_NUM_ENTRIES 16   /* ruby/st.h struct st_table, the same since Ruby 2.4 */
#define SDB_ST_ENTRIES_START 32
#define SDB_ST_ENTRIES_BOUND 40
#define SDB_ST_ENTRIES 48
#define SDB_ST_ENTRY_SIZE 24    /* st.c st_table_entry {hash, key, record} */

static int
sdb_class_ivar(const struct sdb_layout *L, uint64_t klass, uint64_t id, uint64_t *out)
{
    uint64_t ext, tbl, n, start, bound, entries, i, kv[2];
    if (sdb_read_u64(klass + L->class_ext_ptr, &ext) || !ext ||
        sdb_read_u64(ext + L->classext_iv_tbl, &tbl) || !tbl ||
        sdb_read_u64(tbl + SDB_ST_NUM_ENTRIES, &n) || sdb_read_u64(tbl + SDB_ST_ENTRIES_START, &start) ||
        sdb_read_u64(tbl + SDB_ST_ENTRIES_BOUND, &bound) || sdb_read_u64(tbl + SDB_ST_ENTRIES, &entries) ||
        bound < start || bound - start > 4096 || !entries)
        return -1;
    for (i = start; i < bound; i++) {
        if (sdb_read(entries + i * SDB_ST_ENTRY_SIZE + 8, kv, 16)) return -1;
        if (kv[0] == id) {
            *out = kv[1];
            return 0;
        }
    }
    return -1;
}

static int
sdb_is_path(uint64_t v, const char *want)
{
    VALUE s = (VALUE)v;
    uint64_t flags;
    if (!v || (v & 7) || sdb_read_u64(v, &flags) || (flags & 0x1f) != 0x05) return 0;
    return RSTRING_LEN(s) == (long)strlen(want) && !memcmp(RSTRING_PTR(s), want, strlen(want));
}

/* RubyVM::InstructionSequence.of(klass.instance_method(name)), for rb_protect: [klass, name] */
static VALUE
sdb_iseq_of(VALUE args)
{
    VALUE m = rb_funcall(RARRAY_AREF(args, 0), rb_intern("instance_method"), 1, RARRAY_AREF(args, 1));
    return rb_funcall(rb_path2class("RubyVM::InstructionSequence"), rb_intern("of"), 1, m);
}

/* The caller/callee link the sampler checks: a method's frame sits at its caller's sp +
 * (local_table_size + 3) words (vm_call_iseq_setup_normal). Checked on this thread's own stack,
 * which stands still while we read it (RubyGems' require gives method/block pairs): a link that
 * does not hold withdraws both fields (SDB_NA), and the sampler then checks no link. With no
 * pair on the stack (`ruby -rsdb`), the row's sourced offsets stay. */
static void
sdb_check_link(struct sdb_layout *L)
{
    uint64_t th = (uint64_t)(uintptr_t)RTYPEDDATA_DATA(rb_thread_current());
    uint64_t ec, cfp, stack, stack_size, end, pc, iseq, sp, ep, body;
    uint64_t callee_ep = 0;
    uint32_t type, locals, callee_locals = 0;
    unsigned char cfpbuf[256];
    int callee_method = 0, checked = 0, failed = 0;

    if (L->cfp_sp == SDB_NA || L->body_local_table_size == SDB_NA) return;
    if (L->cfp_sp + 8 > L->cfp_size || sdb_read_u64(th + L->thread_ec, &ec) || sdb_read_u64(ec + L->ec_cfp, &cfp) ||
        sdb_read_u64(ec + L->ec_vm_stack, &stack) || sdb_read_u64(ec + L->ec_vm_stack_size, &stack_size)) {
        failed = 1;
        goto out;
    }
    end = stack + stack_size * 8;
    for (; cfp < end && cfp >= stack; cfp += L->cfp_size) {
        int ruby = 0;
        if (sdb_read(cfp, cfpbuf, L->cfp_size)) break;
        memcpy(&pc, cfpbuf + L->cfp_pc, 8);
        memcpy(&iseq, cfpbuf + L->cfp_iseq, 8);
        memcpy(&sp, cfpbuf + L->cfp_sp, 8);
        memcpy(&ep, cfpbuf + L->cfp_ep, 8);
        if (iseq && pc && sdb_is_iseq(iseq) && !sdb_read_u64(iseq + L->iseq_body, &body) && body &&
            !sdb_read(body + L->body_type, &type, 4) && !sdb_read(body + L->body_local_table_size, &locals, 4)) {
            ruby = 1;
            if (callee_method && (type == 1 || type == 2)) { /* ISEQ_TYPE_METHOD, ISEQ_TYPE_BLOCK */
                checked++;
                if (callee_ep != sp + ((uint64_t)callee_locals + 3) * 8) failed++;
            }
        }
        callee_method = ruby && type == 1;
        callee_ep = ep;
        callee_locals = ruby ? locals : 0;
    }
out:
    if (getenv("SDB_DEBUG_LAYOUT"))
        fprintf(stderr, "sdb: caller/callee links: %d checked, %d failed (cfp_sp +%u, local_table_size +%u)\n",
                checked, failed, L->cfp_sp, L->body_local_table_size);
    if (failed) L->cfp_sp = L->body_local_table_size = SDB_NA;
}

static void
sdb_check_classes(struct sdb_layout *L, VALUE mod)
{
    VALUE sing = rb_singleton_class(mod);
    uint64_t v = 0;
    if (L->class_ext_ptr != SDB_NA && L->classext_iv_tbl != SDB_NA) {
        L->id_classpath = rb_intern("__classpath__");
        L->id_tmp_classpath = rb_intern("__tmp_classpath__");
        L->id_attached = rb_intern("__attached__");
        if (sdb_class_ivar(L, (uint64_t)mod, L->id_classpath, &v) || !sdb_is_path(v, "Sdb"))
            L->id_classpath = L->id_tmp_classpath = 0;
        if (sdb_class_ivar(L, (uint64_t)sing, L->id_attached, &v) || v != (uint64_t)mod)
            L->id_attached = 0;
        if (!L->id_classpath) L->class_ext_ptr = L->classext_iv_tbl = SDB_NA;
    }
    if (L->classext_classpath != SDB_NA &&
        (sdb_read_u64((uint64_t)mod + L->classext_classpath, &v) || !sdb_is_path(v, "Sdb")))
        L->classext_classpath = SDB_NA;
    if (L->classext_attached_object != SDB_NA &&
        (sdb_read_u64((uint64_t)sing + L->classext_attached_object, &v) || v != (uint64_t)mod))
        L->classext_attached_object = SDB_NA;
    if (L->body_builtin_attrs != SDB_NA) {
        /* a built-in method marked leaf (attr 0x01) must read as such, a method of ours as none */
        int state = 0;
        VALUE iseqw = rb_protect(sdb_iseq_of, rb_ary_new_from_args(2, rb_cInteger, ID2SYM(rb_intern("-@"))), &state);
        VALUE ours = state ? Qnil : rb_protect(sdb_iseq_of, rb_ary_new_from_args(2, rb_singleton_class(mod),
                                                ID2SYM(rb_intern("enabled?"))), &state);
        uint64_t body, attrs = 0, mine = 1, iseq;
        if (state) rb_set_errinfo(Qnil);
        /* an InstructionSequence's data is a pointer to the rb_iseq_t* (iseq.c iseqw_new) */
        if (state || NIL_P(iseqw) || NIL_P(ours) || !RTYPEDDATA_P(iseqw) || !RTYPEDDATA_P(ours) ||
            sdb_read_u64((uint64_t)(uintptr_t)RTYPEDDATA_DATA(iseqw), &iseq) ||
            sdb_read_u64(iseq + L->iseq_body, &body) ||
            sdb_read(body + L->body_builtin_attrs, &attrs, 4) || !(attrs & 0x01) ||
            sdb_read_u64((uint64_t)(uintptr_t)RTYPEDDATA_DATA(ours), &iseq) ||
            sdb_read_u64(iseq + L->iseq_body, &body) ||
            sdb_read(body + L->body_builtin_attrs, &mine, 4) || (mine & 0xffffffffu) != 0)
            L->body_builtin_attrs = SDB_NA;
    }
    if (getenv("SDB_DEBUG_LAYOUT"))
        fprintf(stderr, "sdb: builtin attrs +%u; class facts: classpath +%u, ivar ids %llu/%llu, attached +%u / id %llu\n",
                L->body_builtin_attrs, L->classext_classpath, (unsigned long long)L->id_classpath, (unsigned long long)L->id_tmp_classpath,
                L->classext_attached_object, (unsigned long long)L->id_attached);
}

/* ---------- GC (for the sidecar's "(garbage collection)" frame) ----------
 * Ruby calls GC_ENTER/GC_EXIT hooks around every piece of GC work (a full mark, an incremental
 * step, a lazy sweep step), on the thread that does it, which holds the GVL. The hook stores
 * 1/0 in the header: the sidecar reads it with its sample, no syscall. */
static void
sdb_gc_event(VALUE tpval, void *data)
{
    rb_event_flag_t ev = rb_tracearg_event_flag(rb_tracearg_from_tracepoint(tpval));
    struct sdb_header *h = sdb.hdr;
    (void)data;
    if (h) __atomic_store_n(&h->gc_active, (ev & RUBY_INTERNAL_EVENT_GC_ENTER) ? 1u : 0u, __ATOMIC_RELAXED);
}

static void
sdb_hook_gc(void)
{
    static VALUE tp = 0;
#if RUBY_API_VERSION_MAJOR == 3 && RUBY_API_VERSION_MINOR < 3
    /* Before 3.3, any GC event hook turns off the allocation fast path for every object
     * (gc.c: newobj_of checks flags.has_hook, set by any objspace event; 3.3 checks only for a
     * NEWOBJ hook): an allocation-heavy app ran 12-15 % slower with this hook on 3.1. No GC frame
     * there rather than a slower app. */
    return;
#endif
    if (tp) return;
    tp = rb_tracepoint_new(0, RUBY_INTERNAL_EVENT_GC_ENTER | RUBY_INTERNAL_EVENT_GC_EXIT, sdb_gc_event, NULL);
    rb_obj_hide(tp); /* not one more TracePoint for ObjectSpace.each_object */
    rb_gc_register_mark_object(tp);
    rb_tracepoint_enable(tp);
}

/* ---------- GC seen from outside (Ruby 3.1, where sdb_hook_gc hooks nothing) ----------
 * The sidecar reads two words of the VM with every tick: objspace->flags, whose during_gc bit
 * gc_enter sets and gc_exit clears on the thread that holds the GVL, and the main ractor's
 * threads.running_ec, which Ruby sets to the ec that takes the GVL or switches fibers
 * (ractor_core.h: rb_ractor_thread_switch, rb_ractor_set_current_ec). While during_gc is set,
 * the thread whose ec is the running ec is the one collecting. No hook: allocation is untouched.
 * Both addresses are found here and proven, or left 0 (then no GC frame, as before):
 *  - objspace->flags: among the words of rb_vm_t, the one pointer whose word at +objspace_flags
 *    changes by exactly the dont_gc bit when GC is disabled and enabled (rb_gc_disable first
 *    finishes a GC in progress, as GC.disable does; the app's own setting is put back, and no GC
 *    can start in between: this thread holds the GVL and allocates nothing);
 *  - running_ec: the one word of the main ractor that holds this thread's ec (it holds the GVL)
 *    and is followed by the main thread's rb_thread_t* (threads.running_ec, threads.main). */
#if RUBY_API_VERSION_MAJOR == 3 && RUBY_API_VERSION_MINOR < 2
extern void *ruby_current_vm_ptr;      /* vm_core.h; exported by libruby 3.1 */
extern void *ruby_single_main_ractor;  /* vm_core.h; the main ractor while it is the only one */
#define SDB_VM_WORDS 512               /* rb_vm_t is searched in its first 4 KiB ... */
#define SDB_RACTOR_WORDS 256           /* ... rb_ractor_t in its first 2 KiB */

static int
sdb_plausible_ptr(uint64_t v)
{
    return v >= 4096 && (v & 7) == 0 && v < 0x0100000000000000ull;
}
#endif

static void
sdb_find_gc_words(struct sdb_layout *L)
{
    L->gc_flags_addr = 0;
    L->running_ec_addr = 0;
#if RUBY_API_VERSION_MAJOR == 3 && RUBY_API_VERSION_MINOR < 2
    static uint64_t vmw[SDB_VM_WORDS];
    static uint32_t off[SDB_VM_WORDS], on[SDB_VM_WORDS];
    static unsigned char ok[SDB_VM_WORDS];
    uint64_t vm = (uint64_t)(uintptr_t)ruby_current_vm_ptr, r = (uint64_t)(uintptr_t)ruby_single_main_ractor;
    uint64_t th, ec, main_th, w[2], flags = 0, rec = 0;
    uint32_t dont, i, nvm = 0, found = 0;
    VALUE was;
    if (L->objspace_flags == SDB_NA || L->gc_dont_gc_bit >= 32 || L->gc_during_bit >= 32 || !vm || !r) return;
    dont = 1u << L->gc_dont_gc_bit;
    while (nvm < SDB_VM_WORDS && sdb_read_u64(vm + 8ull * nvm, &vmw[nvm]) == 0) nvm++;
    was = rb_gc_disable();
    for (i = 0; i < nvm; i++)
        ok[i] = sdb_plausible_ptr(vmw[i]) && sdb_read(vmw[i] + L->objspace_flags, &on[i], 4) == 0;
    rb_gc_enable();
    for (i = 0; i < nvm; i++)
        ok[i] = ok[i] && sdb_read(vmw[i] + L->objspace_flags, &off[i], 4) == 0;
    if (was == Qtrue) rb_gc_disable();
    for (i = 0; i < nvm; i++) {
        if (ok[i] && (on[i] & dont) && (on[i] ^ off[i]) == dont) {
            flags = vmw[i] + L->objspace_flags;
            found++;
        }
    }
    if (found != 1) return;

    th = (uint64_t)(uintptr_t)RTYPEDDATA_DATA(rb_thread_current());
    main_th = (uint64_t)(uintptr_t)RTYPEDDATA_DATA(rb_thread_main());
    if (sdb_read_u64(th + L->thread_ec, &ec) || ec == 0) return;
    found = 0;
    for (i = 0; i + 1 < SDB_RACTOR_WORDS; i++) {
        if (sdb_read(r + 8ull * i, w, sizeof(w))) break;
        if (w[0] == ec && w[1] == main_th) {
            rec = r + 8ull * i;
            found++;
        }
    }
    if (found != 1) return;
    L->gc_flags_addr = flags;
    L->running_ec_addr = rec;
    if (getenv("SDB_DEBUG_LAYOUT"))
        fprintf(stderr, "sdb: GC words: objspace->flags at vm word, running_ec at main ractor +%llu\n",
                (unsigned long long)(rec - r));
#endif
}

/* ---------- the ID table (for the sidecar's C-function names) ----------
 * The sidecar names a C method by its ID, through ruby_global_symbols
 * (symbol.c: {u32 last_id; st_table *str_sym; VALUE ids; ...}; ids is an
 * Array of 512-entry chunks of [String, Symbol] pairs). The symbol is hidden
 * (and stripped from Debian's libruby), so find it: scan libruby's writable
 * data for a struct whose ids table yields, for two known IDs, exactly the
 * String objects rb_id2str returns. A wrong candidate cannot pass that. */
static int
sdb_array_entry(const struct sdb_layout *L, uint64_t ary, uint64_t idx, uint64_t *out)
{
    uint64_t flags, len, ptr;
    if (ary == 0 || (ary & 7) || sdb_read_u64(ary, &flags) != 0 || (flags & 0x1f) != 0x07) return -1;
    if (flags & (1ULL << L->rarray_embed_bit)) {
        len = (flags >> L->rarray_embed_len_shift) & L->rarray_embed_len_mask;
        ptr = ary + L->rarray_embed_ary;
    }
    else {
        if (sdb_read_u64(ary + L->rarray_heap_len, &len) != 0 || sdb_read_u64(ary + L->rarray_heap_ptr, &ptr) != 0)
            return -1;
    }
    if (idx >= len) return -1;
    return sdb_read_u64(ptr + idx * 8, out);
}

static int
sdb_symbols_match(const struct sdb_layout *L, uint64_t ids, ID id)
{
    uint64_t serial = id > L->tlast_op_id ? (uint64_t)id >> 4 : (uint64_t)id;
    uint64_t chunk, str;
    VALUE want = rb_id2str(id);
    if (!want) return 0;
    if (sdb_array_entry(L, ids, serial / 512, &chunk) != 0) return 0;
    if (sdb_array_entry(L, chunk, (serial % 512) * 2, &str) != 0) return 0;
    return str == (uint64_t)want;
}

static uint64_t
sdb_find_global_symbols(const struct sdb_layout *L)
{
    char line[1024];
    uint64_t found = 0;
    ID probe1 = rb_intern("sleep"), probe2 = rb_intern("sdb_probe_for_the_symbol_table");
    FILE *maps;
    if (L->rarray_embed_len_mask == SDB_NA || L->tlast_op_id == SDB_NA) return 0;
    if (!(maps = fopen("/proc/self/maps", "re"))) return 0;
    while (!found && fgets(line, sizeof(line), maps)) {
        unsigned long lo, hi;
        char perms[8], path[512] = "";
        if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %511s", &lo, &hi, perms, path) < 3) continue;
        if (perms[0] != 'r' || perms[1] != 'w' || !strstr(path, "libruby")) continue;
        for (uint64_t a = lo; a + 24 <= hi; a += 8) {
            uint64_t ids = *(const uint64_t *)(uintptr_t)(a + 16); /* our own mapped rw data */
            if (ids == 0 || (ids & 7) || ids == (uint64_t)Qnil) continue;
            if (sdb_symbols_match(L, ids, probe1) && sdb_symbols_match(L, ids, probe2)) {
                found = a;
                break;
            }
        }
    }
    fclose(maps);
    return found;
}

static const struct sdb_layout_row *
sdb_pick_row(const char *name)
{
    size_t i;
    for (i = 0; i < SDB_LAYOUT_ROW_COUNT; i++)
        if (strcmp(sdb_layout_rows[i].name, name) == 0) return &sdb_layout_rows[i];
    return NULL;
}

/* SDB_TEST_CORRUPT_LAYOUT=<field> (tests only): shift one offset by 8. */
static void
sdb_corrupt_for_tests(struct sdb_layout *L)
{
    const char *e = getenv("SDB_TEST_CORRUPT_LAYOUT");
    if (!e || !*e) return;
    if (!strcmp(e, "1") || !strcmp(e, "thread_ec")) L->thread_ec += 8;
    else if (!strcmp(e, "body_pathobj")) L->body_pathobj += 8;
    else if (!strcmp(e, "cfp_iseq")) L->cfp_iseq += 8;
    else if (!strcmp(e, "body_first_lineno")) L->body_first_lineno += 8;
    else if (!strcmp(e, "cfp_size")) L->cfp_size += 8;
    else if (!strcmp(e, "body_local_table_size")) L->body_local_table_size += 8;
}

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

static const rb_data_type_t sdb_threads_type = {
    "sdb_threads", { sdb_threads_mark, NULL, NULL, }, 0, 0, 0
};

static uint64_t
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
        return ((b >> L->thread_status_shift) & L->thread_status_mask) == SDB_THREAD_KILLED;
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
static int
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
static struct sdb_slot *
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

static VALUE
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
static void
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
static void
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
static void
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
static void
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
static const char *
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
 * longer Ruby: unlink it first. */
static void
sdb_before_exec(void)
{
    if (getpid() != sdb.pid) return;
    if (sdb.hdr && sdb.path[0]) unlink(sdb.path);
    if (sdb_spare.map) { /* a new spare is made at the next fork, if exec fails */
        if (!sdb_spare.lent_to) unlink(sdb_spare.path);
        sdb_spare_drop();
    }
}

/* exec returned (raised): we are still this Ruby: publish the registry again under the same
 * path, contents unchanged. */
static void
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

/* ---------- the methods sdb takes over: Thread#name=, Process._fork, exec ----------
 * Each is replaced by a C function of the same name, class, visibility and arity that calls
 * Ruby's own C function for it first: a C method pushes no Ruby frame and has Ruby's own label
 * (`Thread#name=`, `Process._fork`, `Kernel#exec`); no module is prepended, so no core class
 * gets an origin class (on 3.3 a prepended Kernel makes Ruby's profiling API say
 * `Kernel.sleep`). Ruby's function is found through the method's entry: UnboundMethod data
 * (struct METHOD, proc.c) holds the rb_method_entry_t*, whose definition (method.h) holds the
 * cfunc {func, invoker, argc} at +8. Every fact is checked before use (an imemo_ment with this
 * method's id and owner, a CFUNC definition of this arity), through fault-safe reads. */
#define SDB_ME_CALLED_ID 24
#define SDB_ME_OWNER 32
#define SDB_ME_DEF 16
#define SDB_DEF_CFUNC_FUNC 8
#define SDB_DEF_CFUNC_ARGC 24

static VALUE
sdb_instance_method(VALUE args)
{
    return rb_funcall(RARRAY_AREF(args, 0), rb_intern("instance_method"), 1, RARRAY_AREF(args, 1));
}

static sdb_cfunc_t
sdb_cfunc_of(VALUE owner, const char *name, int argc)
{
    ID id = rb_intern(name);
    int state = 0, off;
    VALUE um = rb_protect(sdb_instance_method, rb_ary_new_from_args(2, owner, ID2SYM(id)), &state);
    uint64_t data;
    if (state) {
        rb_set_errinfo(Qnil);
        return NULL;
    }
    if (!RB_TYPE_P(um, T_DATA) || !RTYPEDDATA_P(um)) return NULL;
    data = (uint64_t)(uintptr_t)SDB_TYPED_DATA(um);
    for (off = 16; off <= 40; off += 8) { /* me: +24 on 3.1 (recv, klass, iclass), +32 on 3.3+ (owner) */
        uint64_t me, flags, called, mowner, def, func;
        uint8_t type;
        int32_t n;
        if (sdb_read_u64(data + off, &me) || !me || (me & 7) || sdb_read_u64(me, &flags) ||
            (flags & 0x1f) != 0x1a || ((flags >> 12) & 0xf) != 6)
            continue;
        if (sdb_read_u64(me + SDB_ME_CALLED_ID, &called) || called != (uint64_t)id ||
            sdb_read_u64(me + SDB_ME_OWNER, &mowner) || mowner != (uint64_t)owner ||
            sdb_read_u64(me + SDB_ME_DEF, &def) || !def || sdb_read(def, &type, 1) || (type & 0xf) != 1 ||
            sdb_read(def + SDB_DEF_CFUNC_ARGC, &n, 4) || n != argc ||
            sdb_read_u64(def + SDB_DEF_CFUNC_FUNC, &func) || !func)
            continue;
        RB_GC_GUARD(um);
        return (sdb_cfunc_t)(uintptr_t)func;
    }
    return NULL;
}

static VALUE
sdb_m_name_set(VALUE self, VALUE name)
{
    VALUE ret = sdb.orig_name_set(self, name); /* raises as Ruby does; returns the frozen name or nil */
    sdb_slot_rename(sdb_thread_ptr(self), ret);
    return ret;
}

static VALUE
sdb_m_fork(VALUE self)
{
    VALUE pid;
    if (sdb.hdr && sdb.enabled) {
        sdb_sweep_children(1);
        sdb_spare_ready();
        sdb.fork_boot_ns = sdb_now_ns(CLOCK_BOOTTIME); /* the child's start lies after this */
    }
    pid = sdb.orig_fork(self);
    if (FIXNUM_P(pid) && FIX2LONG(pid) > 0 && sdb.hdr) {
        if (sdb_spare.map && !sdb_spare.lent_to) sdb_spare.lent_to = (pid_t)FIX2LONG(pid);
        sdb_follow_child((pid_t)FIX2LONG(pid));
    }
    else if (pid == INT2FIX(0)) {
        char why[256];
        const char *reason = sdb_after_fork_child(why, sizeof(why));
        if (reason) {
            char msg[300];
            snprintf(msg, sizeof(msg), "sdb: %s", reason);
            sdb_warn(msg);
        }
    }
    return pid;
}

struct sdb_exec_call {
    sdb_cfunc_t func;
    int argc;
    const VALUE *argv;
    VALUE self;
};

static VALUE
sdb_exec_call(VALUE p)
{
    const struct sdb_exec_call *c = (const struct sdb_exec_call *)p;
    return c->func(c->argc, c->argv, c->self);
}

static VALUE
sdb_exec_with(sdb_cfunc_t func, int argc, const VALUE *argv, VALUE self)
{
    struct sdb_exec_call c = { func, argc, argv, self };
    int state = 0;
    VALUE ret;
    sdb_before_exec();
    ret = rb_protect(sdb_exec_call, (VALUE)&c, &state);
    sdb_after_failed_exec(); /* exec came back (it raised): still this Ruby */
    if (state) rb_jump_tag(state);
    return ret;
}

static VALUE sdb_m_exec_kernel(int argc, VALUE *argv, VALUE self) { return sdb_exec_with(sdb.orig_exec_kernel, argc, argv, self); }
static VALUE sdb_m_exec_kernel_s(int argc, VALUE *argv, VALUE self) { return sdb_exec_with(sdb.orig_exec_kernel_s, argc, argv, self); }
static VALUE sdb_m_exec_process(int argc, VALUE *argv, VALUE self) { return sdb_exec_with(sdb.orig_exec_process, argc, argv, self); }

/* Finds Ruby's functions, then (all found, or none replaced) puts ours in their place. NULL or
 * the name of the method that was not found. */
static const char *
sdb_take_over_methods(void)
{
    VALUE kernel_s = rb_singleton_class(rb_mKernel), process_s = rb_singleton_class(rb_mProcess), verbose;
    if (!(sdb.orig_name_set = sdb_cfunc_of(rb_cThread, "name=", 1))) return "Thread#name=";
    if (!(sdb.orig_fork = sdb_cfunc_of(process_s, "_fork", 0))) return "Process._fork";
    if (!(sdb.orig_exec_kernel = sdb_cfunc_of(rb_mKernel, "exec", -1))) return "Kernel#exec";
    if (!(sdb.orig_exec_kernel_s = sdb_cfunc_of(kernel_s, "exec", -1))) return "Kernel.exec";
    if (!(sdb.orig_exec_process = sdb_cfunc_of(process_s, "exec", -1))) return "Process.exec";
    /* optional: without them the thread-begin hook calls the methods */
    sdb.orig_native_thread_id = sdb_cfunc_of(rb_cThread, "native_thread_id", 0);
    sdb.orig_thread_name = sdb_cfunc_of(rb_cThread, "name", 0);
    verbose = ruby_verbose; /* no "method redefined" warning under -w */
    ruby_verbose = Qnil;
    rb_define_method(rb_cThread, "name=", sdb_m_name_set, 1);
    rb_define_singleton_method(rb_mProcess, "_fork", sdb_m_fork, 0);
    rb_define_private_method(rb_mKernel, "exec", sdb_m_exec_kernel, -1);
    rb_define_singleton_method(rb_mKernel, "exec", sdb_m_exec_kernel_s, -1);
    rb_define_singleton_method(rb_mProcess, "exec", sdb_m_exec_process, -1);
    ruby_verbose = verbose;
    return NULL;
}

/* ---------- units of work (spans): Sdb::Spans, called by Sdb.label and the middlewares ----------
 * A span is a web request, a job or a labelled block on one thread. Its begin and end go into the
 * registry's span ring (sdb_registry.h); while it runs, the thread's slot names it (span, and the
 * ec of the fiber it runs on). All of it with the GVL held (these are C methods): one writer at a
 * time. Nothing here allocates once an endpoint name has been seen: a Hash lookup, a clock read
 * and a few stores. */

static uint64_t
sdb_current_ec(uint64_t th)
{
    return th ? *(const uint64_t *)(uintptr_t)(th + sdb.layout.thread_ec) : 0;
}

/* The id of an endpoint name in the registry's string table (interned once), 0: none or refused. */
static uint32_t
sdb_intern(VALUE str)
{
    VALUE v;
    long len;
    uint32_t used, need, id;
    if (SYMBOL_P(str)) str = rb_sym2str(str);
    if (!RB_TYPE_P(str, T_STRING)) return 0;
    v = rb_hash_lookup2(sdb.strings, str, Qundef);
    if (v != Qundef) return (uint32_t)FIX2ULONG(v);
    len = RSTRING_LEN(str);
    used = sdb.hdr->strings_used;
    need = (uint32_t)((4 + len + 3) & ~3L);
    if (len == 0 || len > SDB_STRING_MAX || (uint64_t)used + need > SDB_STRINGS_SIZE) {
        sdb.hdr->strings_refused++; /* not cached: the Hash stays as small as the table */
        return 0;
    }
    memcpy(sdb.strings_base + used, &(uint32_t){ (uint32_t)len }, 4);
    memcpy(sdb.strings_base + used + 4, RSTRING_PTR(str), (size_t)len);
    __atomic_store_n(&sdb.hdr->strings_used, used + need, __ATOMIC_RELEASE);
    id = used + 1;
    rb_hash_aset(sdb.strings, rb_str_new_frozen(str), ULONG2NUM(id));
    return id;
}

static void
sdb_span_write(uint32_t what, uint32_t kind, uint64_t span, uint64_t parent, uint64_t thread_serial,
               uint32_t endpoint, uint32_t status, VALUE request_id)
{
    uint64_t i = sdb.hdr->span_head;
    struct sdb_span_event *e = &sdb.spans[i & (SDB_SPAN_EVENTS - 1)];
    __atomic_store_n(&e->seq, 2 * i + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    e->span = span;
    e->parent = parent;
    e->thread_serial = thread_serial;
    e->at_ns = sdb_now_ns(CLOCK_MONOTONIC);
    e->what = what;
    e->kind = kind;
    e->endpoint = endpoint;
    e->status = status;
    if (RB_TYPE_P(request_id, T_STRING) && RSTRING_LEN(request_id) < SDB_REQUEST_ID_MAX &&
        !memchr(RSTRING_PTR(request_id), 0, (size_t)RSTRING_LEN(request_id))) {
        memcpy(e->request_id, RSTRING_PTR(request_id), (size_t)RSTRING_LEN(request_id));
        memset(e->request_id + RSTRING_LEN(request_id), 0, SDB_REQUEST_ID_MAX - (size_t)RSTRING_LEN(request_id));
    }
    else { /* none, or longer than the field: never a cut id */
        memset(e->request_id, 0, SDB_REQUEST_ID_MAX);
    }
    __atomic_store_n(&e->seq, 2 * i + 2, __ATOMIC_RELEASE);
    __atomic_store_n(&sdb.hdr->span_head, i + 1, __ATOMIC_RELEASE);
}

/* Sdb::Spans.current -> the serial of the span this thread is in on this fiber, 0: none. */
static VALUE
sdb_spans_current(VALUE self)
{
    uint64_t th;
    struct sdb_slot *s;
    (void)self;
    if (!sdb.enabled) return INT2FIX(0);
    th = sdb_thread_ptr(rb_thread_current());
    s = sdb_slot_of(th);
    if (!s || s->span_ec != sdb_current_ec(th)) return INT2FIX(0);
    return ULL2NUM(s->span);
}

/* Sdb::Spans.open(kind, endpoint or nil) -> the new span's serial (0: sdb is off). The thread's
 * slot names it from now on, for stacks read on this fiber. */
static VALUE
sdb_spans_open(VALUE self, VALUE kind, VALUE endpoint)
{
    uint64_t th, span, parent = 0, ec;
    struct sdb_slot *s;
    (void)self;
    if (!sdb.enabled || !sdb.hdr) return INT2FIX(0);
    th = sdb_thread_ptr(rb_thread_current());
    ec = sdb_current_ec(th);
    s = sdb_slot_of(th);
    span = sdb.next_span++;
    if (s && s->span_ec == ec) parent = s->span;
    sdb_span_write(SDB_SPAN_BEGIN, FIXNUM_P(kind) ? (uint32_t)FIX2LONG(kind) : 0, span, parent,
                   s ? s->serial : 0, sdb_intern(endpoint), 0, Qnil);
    if (s) {
        __atomic_store_n(&s->span, 0, __ATOMIC_RELEASE); /* never a moment with the new ec and the old span */
        __atomic_store_n(&s->span_ec, ec, __ATOMIC_RELEASE);
        __atomic_store_n(&s->span, span, __ATOMIC_RELEASE);
    }
    return ULL2NUM(span);
}

/* Sdb::Spans.close(span, parent, endpoint or nil, request_id or nil, status) -> nil. The thread
 * is in `parent` again (0: none). */
static VALUE
sdb_spans_close(VALUE self, VALUE span, VALUE parent, VALUE endpoint, VALUE request_id, VALUE status)
{
    uint64_t th, sp, par;
    struct sdb_slot *s;
    (void)self;
    if (!sdb.enabled || !sdb.hdr || !RB_INTEGER_TYPE_P(span) || (sp = NUM2ULL(span)) == 0) return Qnil;
    par = RB_INTEGER_TYPE_P(parent) ? NUM2ULL(parent) : 0;
    th = sdb_thread_ptr(rb_thread_current());
    s = sdb_slot_of(th);
    if (s && s->span == sp) __atomic_store_n(&s->span, par, __ATOMIC_RELEASE);
    sdb_span_write(SDB_SPAN_END, 0, sp, par, s ? s->serial : 0, sdb_intern(endpoint),
                   FIXNUM_P(status) ? (uint32_t)FIX2LONG(status) : 0, request_id);
    return Qnil;
}

/* ---------- Ruby-visible (private) entry points ---------- */

/* Sdb.__open -> nil, or a String: why sdb is disabled (to warn once). Publishes the registry,
 * checks the layout, adopts the threads alive now and installs the hooks. */
static VALUE
sdb_open(VALUE self)
{
    char why[256];
    char name[16];
    const char *reason, *forced = getenv("SDB_FORCE_LAYOUT");
    const struct sdb_layout_row *row;
    VALUE ver = sdb_const_str("RUBY_VERSION");
    (void)self;

    if (sdb.hdr) return Qnil; /* already open */
    sdb_remove_stale_registries();
    sdb.clk_tck = sysconf(_SC_CLK_TCK);
    sdb_copy_cstr(sdb.ruby_version, sizeof(sdb.ruby_version), RSTRING_PTR(ver), RSTRING_LEN(ver));
    {
        VALUE desc = sdb_const_str("RUBY_DESCRIPTION");
        sdb_copy_cstr(sdb.ruby_description, sizeof(sdb.ruby_description), RSTRING_PTR(desc), RSTRING_LEN(desc));
    }
    if (!sdb.free_stack) sdb_slots_alloc(sdb_slot_count_from_env());
    if ((reason = sdb_file_create(getpid(), sdb_proc_start_ticks(), why, sizeof(why))) != NULL)
        return rb_str_new_cstr(reason);
    if (!sdb.end_proc_set) {
        rb_set_end_proc(sdb_at_exit, Qnil);
        sdb.end_proc_set = 1;
    }

    if (forced && *forced) {
        sdb_copy_cstr(name, sizeof(name), forced, strlen(forced));
    }
    else {
        const char *v = RSTRING_PTR(ver), *dot1 = strchr(v, '.');
        const char *dot2 = dot1 ? strchr(dot1 + 1, '.') : NULL;
        size_t len = dot2 ? (size_t)(dot2 - v) : strlen(v);
        sdb_copy_cstr(name, sizeof(name), v, len);
    }
    row = sdb_pick_row(name);
    if (!row) {
        if (forced && *forced)
            snprintf(why, sizeof(why), "SDB_FORCE_LAYOUT=%s names no layout row (known: 3.1 3.2 3.3 3.4 4.0); "
                     "profiling disabled", name);
        else
            snprintf(why, sizeof(why), "Ruby %s has no layout row; profiling disabled "
                     "(set SDB_FORCE_LAYOUT=4.0 or 3.4 to try the nearest row)", RSTRING_PTR(ver));
        sdb_disable(why);
        return rb_str_new_cstr(why);
    }
    sdb_copy_cstr(sdb.hdr->layout_name, sizeof(sdb.hdr->layout_name), row->name, strlen(row->name));
    sdb_copy_cstr(sdb.layout_name, sizeof(sdb.layout_name), row->name, strlen(row->name));
    sdb.layout = row->layout;
    sdb_corrupt_for_tests(&sdb.layout);
    memcpy(&sdb.hdr->layout, &sdb.layout, sizeof(sdb.layout));
    if (sdb_check_layout(&sdb.layout, why, sizeof(why)) != 0) {
        char msg[256 + 128];
        snprintf(msg, sizeof(msg), "layout %s does not match this Ruby %s: %s; profiling disabled "
                 "(report this with `ruby -v`)", row->name, RSTRING_PTR(ver), why);
        sdb_disable(msg);
        return rb_str_new_cstr(msg);
    }
    if (!sdb.hooked && (reason = sdb_take_over_methods()) != NULL) {
        snprintf(why, sizeof(why), "cannot find Ruby's own C function of %s in this Ruby %s; profiling disabled "
                 "(report this with `ruby -v`)", reason, RSTRING_PTR(ver));
        sdb_disable(why);
        return rb_str_new_cstr(why);
    }
    sdb.layout.global_symbols_addr = sdb_find_global_symbols(&sdb.layout);
    sdb_check_classes(&sdb.layout, self);
    sdb_check_link(&sdb.layout);
    sdb_find_gc_words(&sdb.layout);
    memcpy(&sdb.hdr->layout, &sdb.layout, sizeof(sdb.layout));
    sdb_hook_gc();
    sdb.enabled = 1;
    sdb_adopt_running_threads();
    if (!sdb.hooked) {
        rb_event_flag_t events = RUBY_EVENT_THREAD_BEGIN;
#if !SDB_HOOK_NAMES_THREAD
        events |= RUBY_EVENT_THREAD_END;
#endif
        rb_add_event_hook(sdb_thread_event_hook, events, Qnil);
#ifdef HAVE_RB_INTERNAL_THREAD_ADD_EVENT_HOOK
        rb_internal_thread_add_event_hook(sdb_thread_event,
                                          RUBY_INTERNAL_THREAD_EVENT_READY | RUBY_INTERNAL_THREAD_EVENT_RESUMED |
                                          RUBY_INTERNAL_THREAD_EVENT_SUSPENDED | RUBY_INTERNAL_THREAD_EVENT_EXITED,
                                          NULL);
#endif
        pthread_atfork(NULL, NULL, sdb_tls_atfork_child);
        sdb.hooked = 1;
    }
    __atomic_store_n(&sdb.hdr->status, SDB_STATUS_ENABLED, __ATOMIC_RELEASE);
    return Qnil;
}

static VALUE
sdb_enabled_p(VALUE self)
{
    (void)self;
    return sdb.enabled && sdb.hdr && sdb.hdr->status == SDB_STATUS_ENABLED ? Qtrue : Qfalse;
}

static VALUE
sdb_registry_path(VALUE self)
{
    (void)self;
    return sdb.hdr && sdb.path[0] ? rb_str_new_cstr(sdb.path) : Qnil;
}

void
Init_sdb_ext(void)
{
    VALUE mSdb = rb_define_module("Sdb");
    VALUE sing = rb_singleton_class(mSdb);
    const char *priv[] = { "__open", "__enabled?", "__registry_path" };
    size_t i;

    sdb_id_alive_p = rb_intern("alive?");
    sdb_id_name = rb_intern("name");
    sdb_id_warn = rb_intern("warn");
    sdb_id_native_thread_id = rb_intern("native_thread_id");
    sdb.threads_holder = rb_obj_hide(TypedData_Wrap_Struct(rb_cObject, &sdb_threads_type, &sdb) /* not NULL: Ruby marks only data with a pointer */);
    rb_gc_register_mark_object(sdb.threads_holder);
    sdb.strings = rb_obj_hide(rb_hash_new());
    rb_gc_register_mark_object(sdb.strings);
    {
        VALUE spans = rb_define_module_under(mSdb, "Spans");
        rb_define_singleton_method(spans, "current", sdb_spans_current, 0);
        rb_define_singleton_method(spans, "open", sdb_spans_open, 2);
        rb_define_singleton_method(spans, "close", sdb_spans_close, 5);
        rb_define_const(mSdb, "KIND_REQUEST", INT2FIX(SDB_KIND_REQUEST));
        rb_define_const(mSdb, "KIND_JOB", INT2FIX(SDB_KIND_JOB));
        rb_define_const(mSdb, "KIND_LABEL", INT2FIX(SDB_KIND_LABEL));
    }

    rb_define_singleton_method(mSdb, "__open", sdb_open, 0);
    rb_define_singleton_method(mSdb, "__enabled?", sdb_enabled_p, 0);
    rb_define_singleton_method(mSdb, "__registry_path", sdb_registry_path, 0);
    for (i = 0; i < sizeof(priv) / sizeof(priv[0]); i++)
        rb_funcall(sing, rb_intern("private"), 1, ID2SYM(rb_intern(priv[i])));
    rb_define_const(mSdb, "SLOT_MAIN", INT2FIX(SDB_SLOT_MAIN));
    rb_define_const(mSdb, "SLOT_ADOPTED", INT2FIX(SDB_SLOT_ADOPTED));
}
