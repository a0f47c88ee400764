/*
 * sdb ISeq events: which ISeqs a Ruby process creates, and where GC compaction moves them.
 *
 * Loaded by sidecar/sdb_sidecar/ebpf.py with bcc. Every layout fact comes from the layout row the
 * gem published in its registry, passed in as -D constants (nothing version-specific here):
 *   TARGET_TGID            the recorded process (uprobes are attached for it alone; checked again)
 *   ISEQ_BODY              rb_iseq_t.body
 *   BODY_TYPE, BODY_PATHOBJ, BODY_BASE_LABEL, BODY_LABEL, BODY_FIRST_LINENO, FIRST_LINENO_FIXNUM
 *   RSTR_NOEMBED_BIT, RSTR_HEAP_LEN, RSTR_HEAP_PTR, RSTR_EMBED_LEN (0xffff: length in the flags),
 *   RSTR_EMBED_ARY, RSTR_EMBED_LEN_SHIFT, RSTR_EMBED_LEN_MASK
 *   RARY_EMBED_BIT, RARY_EMBED_LEN_SHIFT, RARY_EMBED_LEN_MASK, RARY_EMBED_ARY, RARY_HEAP_LEN, RARY_HEAP_PTR
 *
 * One uretprobe program serves every function that returns a new, complete ISeq (compilers and
 * the binary loader): it reads the ISeq's type, first line, label, base label, path and realpath
 * in the probe, while the VM is stopped in that function, and sends one variable-size record.
 * Strings are copied up to STR_MAX bytes each into a per-CPU scratch buffer; a longer one is
 * marked truncated and the sidecar reads that ISeq remotely instead.
 * Times are bpf_ktime_get_ns(): CLOCK_MONOTONIC, the clock of the samples.
 */
#include <uapi/linux/ptrace.h>

#define STR_MAX 4096                /* bytes kept per string (PATH_MAX) */
#define STR_MASK (STR_MAX - 1)
#define NSTR 4                      /* label, base_label, path, realpath */
#define DATA_MAX (NSTR * STR_MAX)

#define T_MASK 0x1f
#define T_STRING 0x05
#define T_ARRAY 0x07
#define T_IMEMO 0x1a
#define IMEMO_ISEQ 7

/* a heap object: 8-aligned, above the special constants (Qnil is 0x08 in 3.1, 0x04 from 3.2; Qundef 0x34 / 0x24) */
#define IS_HEAP(v) ((v) > 0x100 && ((v) & 7) == 0)

#define EV_NEW 1
#define EV_MOVE 2

/* flags of an EV_NEW record */
#define F_TRUNCATED 1               /* a string was longer than STR_MAX: read this ISeq remotely */
#define F_UNREADABLE 2              /* a field could not be read: read this ISeq remotely */
#define F_NO_REALPATH 4             /* pathobj was [path, nil] */

struct event_hdr {
    u32 kind;                       /* EV_NEW or EV_MOVE */
    u32 flags;
    u64 time_ns;
    u64 addr;                       /* the new ISeq (EV_NEW); the old address (EV_MOVE) */
    u64 addr2;                      /* EV_MOVE: the new address */
    u32 type;
    s32 first_line;
    u16 len[NSTR];                  /* byte lengths of the strings that follow, back to back */
    u32 probe;                      /* which probe fired (index into the sidecar's probe list) */
    u32 pad;
};

struct event {
    struct event_hdr h;
    char data[DATA_MAX + STR_MAX];  /* room for NSTR strings; the extra STR_MAX keeps every copy in bounds */
};

BPF_PERCPU_ARRAY(scratch, struct event, 1);
BPF_PERF_OUTPUT(events);

static __always_inline u64 rd64(u64 addr, int *ok)
{
    u64 v = 0;
    if (bpf_probe_read_user(&v, sizeof(v), (void *)addr) != 0)
        *ok = 0;
    return v;
}

/* Copies the String VALUE `str` to ev->data at *off; its length into ev->h.len[i]. */
static __always_inline void copy_string(struct event *ev, int i, u64 str, u32 *off, int *ok)
{
    u64 flags, len, ptr;
    u32 o = *off;
    ev->h.len[i] = 0;
    if (!IS_HEAP(str))              /* nil, false, immediates: no string */
        return;
    flags = rd64(str, ok);
    if ((flags & T_MASK) != T_STRING) {
        *ok = 0;
        return;
    }
    if (flags & (1ULL << RSTR_NOEMBED_BIT)) {
        len = rd64(str + RSTR_HEAP_LEN, ok);
        ptr = rd64(str + RSTR_HEAP_PTR, ok);
    } else {
#if RSTR_EMBED_LEN == 0xffff
        len = (flags >> RSTR_EMBED_LEN_SHIFT) & RSTR_EMBED_LEN_MASK;
#else
        len = rd64(str + RSTR_EMBED_LEN, ok);
#endif
        ptr = str + RSTR_EMBED_ARY;
    }
    if (len > STR_MAX - 1) {
        ev->h.flags |= F_TRUNCATED;
        len = STR_MAX - 1;
    }
    if (o > DATA_MAX - STR_MAX)
        return;
    len &= STR_MASK;
    if (len && bpf_probe_read_user(&ev->data[o], len, (void *)ptr) != 0) {
        *ok = 0;
        return;
    }
    ev->h.len[i] = len;
    *off = o + len;
}

/* Element idx (0 or 1) of an Array VALUE; 0 when absent. */
static __always_inline u64 array_at(u64 ary, int idx, int *ok)
{
    u64 flags = rd64(ary, ok), n, ptr;
    if (flags & (1ULL << RARY_EMBED_BIT)) {
        n = (flags >> RARY_EMBED_LEN_SHIFT) & RARY_EMBED_LEN_MASK;
        ptr = ary + RARY_EMBED_ARY;
    } else {
        n = rd64(ary + RARY_HEAP_LEN, ok);
        ptr = rd64(ary + RARY_HEAP_PTR, ok);
    }
    if ((u64)idx >= n)
        return 0;
    return rd64(ptr + 8 * idx, ok);
}

/* uretprobe on every function that returns a new ISeq; `probe` says which (see PROBE_FUNCTIONS). */
static __always_inline int iseq_created(struct pt_regs *ctx, u32 probe)
{
    u32 zero = 0, off = 0;
    int ok = 1;
    u64 iseq, body, flags, pathobj, pflags, path, realpath;
    struct event *ev;

    if ((bpf_get_current_pid_tgid() >> 32) != TARGET_TGID)
        return 0;
    iseq = PT_REGS_RC(ctx);
    if (iseq == 0)
        return 0;
    ev = scratch.lookup(&zero);
    if (!ev)
        return 0;
    ev->h.kind = EV_NEW;
    ev->h.flags = 0;
    ev->h.time_ns = bpf_ktime_get_ns();
    ev->h.addr = iseq;
    ev->h.addr2 = 0;
    ev->h.probe = probe;
    ev->h.type = 0;
    ev->h.first_line = 0;
    ev->h.len[0] = ev->h.len[1] = ev->h.len[2] = ev->h.len[3] = 0;

    flags = rd64(iseq, &ok);
    body = rd64(iseq + ISEQ_BODY, &ok);
    if (!ok || (flags & T_MASK) != T_IMEMO || ((flags >> 12) & 0xf) != IMEMO_ISEQ || body == 0) {
        ev->h.flags |= F_UNREADABLE;
        goto send;
    }
    bpf_probe_read_user(&ev->h.type, 4, (void *)(body + BODY_TYPE));
#if FIRST_LINENO_FIXNUM
    ev->h.first_line = (s32)((s64)rd64(body + BODY_FIRST_LINENO, &ok) >> 1);
#else
    bpf_probe_read_user(&ev->h.first_line, 4, (void *)(body + BODY_FIRST_LINENO));
#endif
    copy_string(ev, 0, rd64(body + BODY_LABEL, &ok), &off, &ok);
    copy_string(ev, 1, rd64(body + BODY_BASE_LABEL, &ok), &off, &ok);
    pathobj = rd64(body + BODY_PATHOBJ, &ok);
    pflags = IS_HEAP(pathobj) ? rd64(pathobj, &ok) : 0;
    if ((pflags & T_MASK) == T_ARRAY) {
        path = array_at(pathobj, 0, &ok);
        realpath = array_at(pathobj, 1, &ok);
        if (!IS_HEAP(realpath) || (rd64(realpath, &ok) & T_MASK) != T_STRING) {
            ev->h.flags |= F_NO_REALPATH;
            realpath = 0;
        }
    } else {
        path = pathobj;
        realpath = pathobj;
    }
    copy_string(ev, 2, path, &off, &ok);
    copy_string(ev, 3, realpath, &off, &ok);
    if (!ok)
        ev->h.flags |= F_UNREADABLE;
send:
    if (off > DATA_MAX)
        off = DATA_MAX;
    events.perf_submit(ctx, ev, sizeof(struct event_hdr) + off);
    return 0;
}

/* uprobe on the GC's object mover gc_move(objspace, src, dest, ...): reports ISeqs only. */
int iseq_moved(struct pt_regs *ctx)
{
    struct event_hdr h = {};
    int ok = 1;
    u64 src = PT_REGS_PARM2(ctx), dest = PT_REGS_PARM3(ctx), flags;
    if ((bpf_get_current_pid_tgid() >> 32) != TARGET_TGID)
        return 0;
    flags = rd64(src, &ok);
    if (!ok || (flags & T_MASK) != T_IMEMO || ((flags >> 12) & 0xf) != IMEMO_ISEQ)
        return 0;
    h.kind = EV_MOVE;
    h.time_ns = bpf_ktime_get_ns();
    h.addr = src;
    h.addr2 = dest;
    events.perf_submit(ctx, &h, sizeof(h));
    return 0;
}

/* One entry point per creating probe, so an event says which probe named it. */
PROBE_FUNCTIONS
