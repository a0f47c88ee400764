/* A target whose memory, as the sidecar sees it, is hostile (tests/integration/test_sidecar_garbage.py).
 *
 *   ruby-garbage HEADER_FILE SECONDS SEED
 *
 * The test compiles this as "ruby-garbage" (the sidecar takes an executable named ruby* for Ruby)
 * and passes the header of a real Ruby's registry: its layout says where fields are. This process
 * publishes a registry of its own in /dev/shm/sdb-<pid> with that layout, whose slots point at fake
 * threads, execution contexts and VM stacks in its own memory, and rewrites them without pause:
 * frames that are almost right (real-looking ISeqs, method entries, svars, env chains) mixed with
 * garbage (unaligned, huge, -1, pointers into unmapped pages, counts far too large). Every write is
 * plain (no seqlock around the stacks), so the sidecar also sees torn copies, as it does of a Ruby
 * that runs. Prints "ready" once the registry is published; removes it on SIGTERM/SIGINT or at the
 * end. Never meant to be sampled correctly: the sidecar must only stay up and count what it drops. */
#define _GNU_SOURCE 1
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "sdb_registry.h"

#define NSLOTS 6
#define GARBAGE_SPANS 64       /* span ring entries (a power of two, as the reader checks) */
#define GARBAGE_STRINGS 4096   /* string table bytes */
#define STACK_WORDS 4096          /* each fake VM stack: 32 KiB */
#define ARENA_SIZE (8u << 20)
#define NISEQ 64
#define NOBJ 256                  /* fake imemos: method entries, svars, crefs */
#define THREAD_SIZE 16384         /* a fake rb_thread_t: th->ec and th->status lie inside (checked) */

static char reg_path[64];
static struct sdb_header *hdr;
static struct sdb_layout L;
static uint64_t rng;

static uint64_t rnd(void)
{
    uint64_t x = rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng = x;
}

static uint64_t below(uint64_t n) { return n ? rnd() % n : 0; }

static void on_signal(int sig)
{
    (void)sig;
    unlink(reg_path);
    _exit(0);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t start_ticks(void)
{
    char buf[1024], *p;
    int fd = open("/proc/self/stat", O_RDONLY), field = 1;
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    p = strrchr(buf, ')');
    if (!p)
        return 0;
    for (p += 2, field = 3; *p && field < 22; p++)
        if (*p == ' ')
            field++;
    return strtoull(p, NULL, 10);
}

/* The arena: fake objects, stacks and heap envs, with unmapped holes. */
static uint8_t *arena;
static uint64_t *iseqs[NISEQ];     /* each: flags, (wrapper), body at L.iseq_body */
static uint64_t *objs[NOBJ];       /* imemos: flags, then words */
static uint64_t *encoded;          /* the ISeqs' instructions: one shared range */
static uint64_t *heap_envs;        /* escaped envs: [-2, -1, 0] triples */
static uint8_t *hole;              /* an unmapped page inside the arena */
static uint64_t *stacks[NSLOTS];
static uint64_t *ecs[NSLOTS][2];   /* two execution contexts per thread (fibers) */
static uint64_t *threads[NSLOTS];  /* rb_thread_t-ish: th->ec at L.thread_ec */

static uint64_t w(const void *p) { return (uint64_t)(uintptr_t)p; }

/* A word that may be anything a torn or stale read could show. */
static uint64_t garbage(void)
{
    switch (below(12)) {
    case 0: return 0;
    case 1: return ~0ull;                          /* Fixnum -1 */
    case 2: return ~7ull;                          /* -8: an aligned address near 2**64 */
    case 3: return ~3ull;
    case 4: return 0x8000000000000000ull + (rnd() & ~7ull);
    case 5: return w(hole) + (rnd() & 0xff8);      /* unmapped */
    case 6: return w(arena) + below(ARENA_SIZE) ;  /* unaligned or not, inside */
    case 7: return w(arena) + ARENA_SIZE - 8;      /* the last word */
    case 8: return rnd() | 1;                      /* a Fixnum */
    case 9: return rnd() & 0x0000fffffffffff8ull;  /* a plausible, probably unmapped address */
    case 10: return 0x24;                          /* Qundef-ish, Qnil-ish */
    default: return rnd();
    }
}

static uint64_t imemo_flags(unsigned type) { return 0x1a | ((uint64_t)type << 12) | (rnd() & 0xffff0000ull); }

static void make_objects(void)
{
    uint8_t *p = arena + 4096;
    int i;
    encoded = (uint64_t *)p;
    p += 64 * 1024;
    for (i = 0; i < NISEQ; i++) {
        uint64_t *iseq = (uint64_t *)p, *body = (uint64_t *)(p + 64);
        p += 512;
        iseq[0] = imemo_flags(7);                     /* imemo_iseq */
        *(uint64_t *)((uint8_t *)iseq + L.iseq_body) = w(body);
        *(uint32_t *)((uint8_t *)body + L.body_iseq_size) = 1 + (uint32_t)below(512);
        *(uint64_t *)((uint8_t *)body + L.body_iseq_encoded) = w(encoded) + 8 * below(4096);
        if (below(4) == 0) {                          /* a method's: the caller/callee link is checked */
            *(uint32_t *)((uint8_t *)body + L.body_type) = 1;
            if (L.body_local_table_size != SDB_NA && L.body_local_table_size + 4 <= 448)
                *(uint32_t *)((uint8_t *)body + L.body_local_table_size) = below(8) ? (uint32_t)below(6) : (uint32_t)rnd();
        }
        iseqs[i] = iseq;
    }
    for (i = 0; i < NOBJ; i++) {
        objs[i] = (uint64_t *)p;
        p += 64;
    }
    heap_envs = (uint64_t *)p;
    p += 64 * 1024;
    hole = p;
    p += 4096;
    for (i = 0; i < NSLOTS; i++) {
        stacks[i] = (uint64_t *)p;
        p += STACK_WORDS * 8;
        ecs[i][0] = (uint64_t *)p;
        ecs[i][1] = (uint64_t *)(p + 128);
        threads[i] = (uint64_t *)(p + 256);
        p += 256 + THREAD_SIZE;
    }
    munmap(hole, 4096);
}

static void scribble_objects(int n)
{
    while (n-- > 0) {
        uint64_t *o = objs[below(NOBJ)];
        unsigned t;
        switch (below(8)) {
        case 0: case 1: case 2: t = 6; break;        /* imemo_ment */
        case 3: case 4: t = 2; break;                /* imemo_svar: o[1] is its cref_or_me */
        case 5: t = 1; break;                        /* imemo_cref */
        case 6: t = (unsigned)below(16); break;
        default: o[0] = garbage(); o[1] = garbage(); continue;
        }
        o[0] = imemo_flags(t);
        o[1] = below(2) ? w(objs[below(NOBJ)]) : garbage();
        o[2] = garbage();
    }
    /* an ISeq's size and start move now and then (a reused address) */
    {
        uint64_t *iseq = iseqs[below(NISEQ)], *body = (uint64_t *)((uint8_t *)iseq + 64);
        if (below(8) == 0)
            iseq[0] = garbage();
        else
            iseq[0] = imemo_flags(7);
        *(uint32_t *)((uint8_t *)body + L.body_iseq_size) = below(16) ? 1 + (uint32_t)below(512) : (uint32_t)rnd();
    }
}

static uint64_t me_value(void)
{
    return below(4) ? w(objs[below(NOBJ)]) : garbage();
}

/* An env at ep: ep[-2] cref_or_me, ep[-1] the previous env (| 1) or a block handler, ep[0] flags.
 * magic: the frame's own most of the time (0: any), so that whole stacks can pass the checks;
 * FINISH (0x20, a frame C called) half of the time. */
static void make_env(uint64_t *ep, uint64_t *stack, int local, uint64_t magic)
{
    static const uint64_t magics[] = {0x11110001, 0x44440001, 0x55550001, 0x66660001, 0x77770001, 0x79990001};
    uint64_t flags = (magic && below(4) ? magic : magics[below(6)]) | (local ? 0x2 : 0) | (below(2) ? 0x20 : 0)
                     | (rnd() & 0xff000000ull);
    ep[-2] = me_value();
    if (local)
        ep[-1] = below(2) ? 0 : garbage();
    else if (below(3) == 0)
        ep[-1] = garbage();
    else if (below(2))
        ep[-1] = w(&stack[16 + 3 * below(STACK_WORDS / 8)]) | 1;     /* deeper in the stack */
    else
        ep[-1] = w(&heap_envs[2 + 3 * below(2000)]) | 1;            /* a heap env */
    ep[0] = below(16) ? flags : garbage();
}

static void scribble_heap_envs(int n)
{
    while (n-- > 0)
        make_env(&heap_envs[2 + 3 * below(2000)], stacks[0], below(3) == 0, 0);
}

/* One thread's whole stack: ec header, control frames at the top, envs below. */
static void scribble_stack(int s)
{
    uint64_t *stack = stacks[s], *ec = ecs[s][below(2)];
    uint64_t cfp_words = L.cfp_size / 8, nf = below(2) ? below(12) : below(8) ? below(120) : below(STACK_WORDS / cfp_words);
    uint64_t size = STACK_WORDS, end, cfp, f;
    uint8_t *fr;
    if (nf * cfp_words + 1 > STACK_WORDS / 2)
        nf = (STACK_WORDS / 2 - 1) / cfp_words;
    end = w(stack) + size * 8;
    cfp = end - (nf + 1) * L.cfp_size;
    for (f = 0; f <= nf; f++) {
        fr = (uint8_t *)(uintptr_t)(cfp + f * L.cfp_size);
        uint64_t *ep = &stack[4 + 3 * below(STACK_WORDS / 6)];
        unsigned kind = (unsigned)below(10);
        uint64_t *iseq = iseqs[below(NISEQ)];
        uint64_t *body = (uint64_t *)((uint8_t *)iseq + 64);
        uint64_t enc = *(uint64_t *)((uint8_t *)body + L.body_iseq_encoded);
        if (below(6) == 0)
            ep = &heap_envs[2 + 3 * below(2000)];
        if (kind < 5) {                               /* a Ruby frame */
            *(uint64_t *)(fr + L.cfp_iseq) = w(iseq);
            *(uint64_t *)(fr + L.cfp_pc) = below(10) ? enc + 8 * below(16) : garbage();
        } else if (kind < 8) {                        /* a C function, an IFUNC */
            *(uint64_t *)(fr + L.cfp_iseq) = kind == 7 ? w(iseq) : 0;
            *(uint64_t *)(fr + L.cfp_pc) = 0;
        } else {                                      /* garbage */
            *(uint64_t *)(fr + L.cfp_iseq) = garbage();
            *(uint64_t *)(fr + L.cfp_pc) = garbage();
        }
        *(uint64_t *)(fr + L.cfp_ep) = below(12) ? w(ep) : garbage();
        make_env(ep, stack, below(2), kind < 5 ? 0x11110001 : kind < 7 ? 0x55550001 : kind == 7 ? 0x66660001 : 0);
    }
    /* the header last or first: torn either way */
    ec[L.ec_vm_stack / 8] = below(32) ? w(stack) : garbage();
    ec[L.ec_vm_stack_size / 8] = below(32) ? size : garbage();
    ec[L.ec_cfp / 8] = below(24) ? cfp : (below(2) ? garbage() : cfp + 8 * below(8));
    /* th->ec (Ruby 3.1's path) and the slot's ec word point at it */
    *(uint64_t *)((uint8_t *)threads[s] + L.thread_ec) = below(32) ? w(ec) : garbage();
    if (L.thread_status != SDB_NA)
        ((uint8_t *)threads[s])[L.thread_status] = (uint8_t)rnd();
}

static struct sdb_slot *slot(int i) { return (struct sdb_slot *)((uint8_t *)hdr + hdr->slots_offset + (size_t)i * hdr->slot_size); }

static uint64_t serials;

static void scribble_slot(int i)
{
    struct sdb_slot *s = slot(i);
    uint64_t g = s->gen;
    int k;
    __atomic_store_n(&s->gen, g + 1, __ATOMIC_RELEASE);
    /* slot 0 stays live with true addresses (what it points at is as garbled as the rest): the
     * sidecar's first read, which tells whether it may read this process at all, goes there */
    if (below(4) == 0 || s->serial == 0) {
        s->live = i == 0 || below(4) != 0;
        s->serial = ++serials;
        s->start_mono_ns = now_ns();
    }
    s->native_tid = below(2) ? (uint32_t)getpid() : (uint32_t)rnd();
    s->thread_addr = i == 0 || below(16) ? w(threads[i]) : garbage();
    s->ec_addr = i == 0 || below(16) ? w((uint8_t *)threads[i] + L.thread_ec) : garbage();
    s->flags = (uint32_t)rnd();
    s->span = below(2) ? rnd() : below(8);          /* a span: garbage, or a small serial */
    s->span_ec = below(2) ? s->ec_addr : rnd();
    for (k = 0; k < SDB_NAME_MAX; k++)               /* no NUL, invalid UTF-8 */
        s->name[k] = (char)(0x80 | rnd());
    __atomic_store_n(&s->gen, g + 2, __ATOMIC_RELEASE);
}

/* The span ring and string table: random bytes, a head and a fill that may or may not fit, and
 * now and then an event whose seq says it is whole (so the reader takes and decodes it). */
static void scribble_spans(void)
{
    uint8_t *ring = (uint8_t *)hdr + hdr->spans_offset;
    uint8_t *strings = (uint8_t *)hdr + hdr->strings_offset;
    uint64_t head = below(4) ? rnd() % 100000 : rnd(), k;
    size_t i;
    for (i = 0; i < GARBAGE_SPANS * sizeof(struct sdb_span_event); i++) ring[i] = (uint8_t)rnd();
    for (i = 0; i < GARBAGE_STRINGS; i++) strings[i] = (uint8_t)rnd();
    for (k = 0; k < GARBAGE_SPANS && k < head; k++) {   /* the events the reader would look at */
        uint64_t n = head - 1 - k;
        struct sdb_span_event *e = (struct sdb_span_event *)(ring + (n % GARBAGE_SPANS) * sizeof(*e));
        if (below(2)) e->seq = 2 * n + 2;
        if (below(2)) e->endpoint = (uint32_t)(below(2) ? rnd() % GARBAGE_STRINGS : rnd());
        if (below(2)) e->what = 1 + (uint32_t)below(2);
    }
    hdr->strings_used = (uint32_t)(below(2) ? rnd() % (GARBAGE_STRINGS + 64) : rnd());
    __atomic_store_n(&hdr->span_head, head, __ATOMIC_RELEASE);
}

int main(int argc, char **argv)
{
    struct sdb_header real;
    size_t size = sizeof(struct sdb_header) + NSLOTS * sizeof(struct sdb_slot) + GARBAGE_SPANS * sizeof(struct sdb_span_event)
                  + GARBAGE_STRINGS;
    uint64_t end, round = 0;
    int fd, i;
    FILE *f;
    if (argc != 4) {
        fprintf(stderr, "usage: %s HEADER_FILE SECONDS SEED\n", argv[0]);
        return 2;
    }
    f = fopen(argv[1], "rb");
    if (!f || fread(&real, sizeof(real), 1, f) != 1) {
        fprintf(stderr, "%s: cannot read a registry header from %s\n", argv[0], argv[1]);
        return 2;
    }
    fclose(f);
    L = real.layout;
    if (L.thread_ec + 8 > THREAD_SIZE || (L.thread_status != SDB_NA && L.thread_status >= THREAD_SIZE)
            || L.cfp_size < 24 || L.cfp_size % 8) {
        fprintf(stderr, "%s: a layout this helper does not handle\n", argv[0]);
        return 2;
    }
    rng = strtoull(argv[3], NULL, 10) * 0x9E3779B97F4A7C15ull | 1;
    end = now_ns() + (uint64_t)(atof(argv[2]) * 1e9);

    arena = mmap(NULL, ARENA_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (arena == MAP_FAILED)
        return 1;
    make_objects();

    snprintf(reg_path, sizeof(reg_path), "%s%d", SDB_REGISTRY_PREFIX, (int)getpid());
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    fd = open(reg_path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)size) != 0) {
        perror(reg_path);
        return 1;
    }
    hdr = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (hdr == MAP_FAILED)
        return 1;
    memcpy(hdr, &real, sizeof(real));
    hdr->status = SDB_STATUS_STARTING;
    hdr->header_size = sizeof(struct sdb_header);
    hdr->slot_size = sizeof(struct sdb_slot);
    hdr->slot_count = NSLOTS;
    hdr->slots_offset = sizeof(struct sdb_header);
    hdr->pid = (uint32_t)getpid();
    hdr->proc_start_ticks = start_ticks();
    hdr->created_mono_ns = now_ns();
    hdr->gc_active = 0;
    hdr->spans_offset = (uint32_t)(sizeof(struct sdb_header) + NSLOTS * sizeof(struct sdb_slot));
    hdr->span_count = GARBAGE_SPANS;
    hdr->strings_offset = hdr->spans_offset + GARBAGE_SPANS * sizeof(struct sdb_span_event);
    hdr->strings_size = GARBAGE_STRINGS;
    scribble_spans();
    for (i = 0; i < NSLOTS; i++) {
        scribble_stack(i);
        scribble_slot(i);
        slot(i)->live = 1;
    }
    scribble_objects(NOBJ * 2);
    scribble_heap_envs(4000);
    __atomic_store_n(&hdr->status, SDB_STATUS_ENABLED, __ATOMIC_RELEASE);
    printf("ready %d\n", (int)getpid());
    fflush(stdout);

    while (now_ns() < end) {
        struct timespec pause = {0, 20000};
        round++;
        for (i = 0; i < NSLOTS; i++)
            scribble_stack(i);
        scribble_objects(16);
        scribble_heap_envs(64);
        if (round % 64 == 0)
            scribble_slot((int)below(NSLOTS));
        if (round % 16 == 0)
            hdr->gc_active = below(4) == 0;
        if (round % 32 == 0)
            scribble_spans();
        if (round % 4 == 0)
            for (i = 0; i < NSLOTS; i++)    /* the gem's state word: state | runs << 8 */
                __atomic_store_n(&slot(i)->state, (uint32_t)(below(5) | (below(4) << 8)), __ATOMIC_RELAXED);
        nanosleep(&pause, NULL);
    }
    unlink(reg_path);
    return 0;
}
