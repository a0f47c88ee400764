/**********************************************************************
 * sdb_file.c - the registry file in /dev/shm: made, checked, published, removed when stale;
 * the fork spare a child takes as its own.
 **********************************************************************/
#include "sdb_gem.h"

/* ---------- small helpers ---------- */

uint64_t
sdb_now_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint32_t
sdb_gettid(void)
{
    return (uint32_t)syscall(SYS_gettid);
}

void
sdb_copy_cstr(char *dst, size_t cap, const char *src, size_t len)
{
    if (len > cap - 1) len = cap - 1;
    if (len == cap - 1) { /* do not cut a UTF-8 sequence in half */
        while (len > 0 && ((unsigned char)src[len] & 0xc0) == 0x80) len--;
    }
    memcpy(dst, src, len);
    memset(dst + len, 0, cap - len);
}

void
sdb_warn(const char *msg)
{
    rb_funcall(rb_mKernel, sdb_id_warn, 1, rb_str_new_cstr(msg));
}

/* Fault-safe read of our own memory: EFAULT instead of SIGSEGV. */
int
sdb_read(uint64_t addr, void *out, size_t len)
{
    struct iovec local = { out, len };
    struct iovec remote = { (void *)(uintptr_t)addr, len };
    if (addr == 0) return -1;
    return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == (ssize_t)len ? 0 : -1;
}

int
sdb_read_u64(uint64_t addr, uint64_t *out)
{
    return sdb_read(addr, out, sizeof(*out));
}

/* ---------- seqlock (writer side) ---------- */

void
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

void
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

uint64_t
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
uint64_t
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
void
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

uint32_t
sdb_slot_count_from_env(void)
{
    const char *e = getenv("SDB_MAX_THREADS");
    long n;
    if (!e || !*e) return SDB_DEFAULT_SLOTS;
    n = strtol(e, NULL, 10);
    if (n < 1 || n > SDB_MAX_SLOTS) return SDB_DEFAULT_SLOTS;
    return (uint32_t)n;
}

VALUE
sdb_const_str(const char *name)
{
    VALUE v = rb_const_get(rb_cObject, rb_intern(name));
    return RB_TYPE_P(v, T_STRING) ? v : rb_str_new_cstr("");
}

/* The slot bookkeeping on the C side: a stack of the slots given back (free_stack) and, above the
 * high-water mark, slots never handed out. Allocated once, at require; a fork child resets it in
 * place (sdb_slots_reset) and allocates nothing: a large malloc makes glibc consolidate its
 * fastbins, a write to every page they lie on, each a copy-on-write fault in a fork child. */
void
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
void
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
    memcpy(h->service_name, sdb.service_name, sizeof(h->service_name));
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
const char *
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
struct sdb_spare_state sdb_spare;

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

void
sdb_spare_drop(void)
{
    if (sdb_spare.map) munmap(sdb_spare.map, sdb.map_size);
    sdb_spare.map = NULL;
    sdb_spare.lent_to = 0;
}

/* Before a fork: a spare ready to lend, made if none is (or the last one is still lent to a
 * live child). Nothing on failure: the child then makes its own registry. */
void
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
int
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
void
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

void
sdb_follow_child(pid_t pid)
{
    if (sdb.nchildren < SDB_CHILDREN_MAX) sdb.children[sdb.nchildren++] = pid;
}

void
sdb_disable(const char *reason)
{
    sdb.enabled = 0;
    if (!sdb.hdr) return;
    sdb_copy_cstr(sdb.hdr->disabled_reason, sizeof(sdb.hdr->disabled_reason), reason, strlen(reason));
    __atomic_store_n(&sdb.hdr->status, SDB_STATUS_DISABLED, __ATOMIC_RELEASE);
}

void
sdb_at_exit(VALUE unused)
{
    (void)unused;
    if (getpid() != sdb.pid) return;
    if (sdb.path[0] && sdb.hdr) unlink(sdb.path);
    if (sdb_spare.map) unlink(sdb_spare.path); /* gone already if a child took it */
    sdb_sweep_children(0);
}
