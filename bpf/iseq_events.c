/*
 * sdb ISeq events: which ISeqs a Ruby process creates, and where GC compaction moves them.
 *
 * Loaded by sidecar/sdb_sidecar/ebpf/symbolizer.py with bcc. Every layout fact comes from the layout row the
 * gem published in its registry, passed in as -D constants (nothing version-specific here):
 * The recorded processes (a process tree shares one program) are the keys of the map `targets`: the
 * uprobes are attached for each of them alone, and each probe checks the map again; a record carries
 * the process (tgid) it came from.
 *   ISEQ_BODY              rb_iseq_t.body
 *   BODY_TYPE, BODY_PATHOBJ, BODY_BASE_LABEL, BODY_LABEL, BODY_FIRST_LINENO, FIRST_LINENO_FIXNUM
 *   RSTR_NOEMBED_BIT, RSTR_HEAP_LEN, RSTR_HEAP_PTR, RSTR_EMBED_LEN (SDB_NA: length in the flags),
 *   RSTR_EMBED_ARY, RSTR_EMBED_LEN_SHIFT, RSTR_EMBED_LEN_MASK
 *   RARY_EMBED_BIT, RARY_EMBED_LEN_SHIFT, RARY_EMBED_LEN_MASK, RARY_EMBED_ARY, RARY_HEAP_LEN, RARY_HEAP_PTR
 *   SDB_NA                 the registry's "not available" (sdb_registry.h, through sdb_trace.registry_h)
 *
 * One program serves every function that returns a new, complete ISeq (compilers and the binary
 * loader: uretprobes) and rb_iseq_translate_threaded_code (its first argument: an entry uprobe,
 * where the build keeps hidden symbols; sidecar/sdb_sidecar/ebpf/probes.py): it reads the ISeq's type, first line, label, base label, path and realpath
 * in the probe, while the VM is stopped in that function, and sends one variable-size record.
 * Strings are copied up to STR_MAX bytes each into a per-CPU scratch buffer; a longer one is
 * marked truncated and the sidecar reads that ISeq remotely instead.
 * Times are bpf_ktime_get_ns(): CLOCK_MONOTONIC, the clock of the samples.
 * RINGBUF_PAGES (a power of two) sizes the ring buffer the records go through.
 *
 * Records never wake the sidecar's reader (it drains every few tens of ms while they come), except
 * two: the ISeq record whose count reaches the number the reader set in `budget` (the sidecar's
 * governor: its event budget is spent), so that the reader can pause the probes at once, not a poll
 * later; and the first record after the reader went idle (`budget[3]`), so that an idle reader need
 * not wake up to look.
 */
#include <uapi/linux/ptrace.h>

#define STR_MAX 4096                /* bytes kept per string (PATH_MAX) */
#define STR_MASK (STR_MAX - 1)
#define NSTR 4                      /* label, base_label, path, realpath */
#define DATA_MAX (NSTR * STR_MAX)

/* Ruby's type tags and imemo types come from the layout row as -D flags (ebpf/iseq_events.py bpf_cflags):
 * RB_T_MASK, RB_T_STRING, RB_T_ARRAY, RB_T_IMEMO, RB_IMEMO_SHIFT, RB_IMEMO_MASK, RB_IMEMO_ISEQ,
 * RB_IMMEDIATE_MASK, RB_FIXNUM_SHIFT */
#define IS_ISEQ(flags) \
    (((flags) & RB_T_MASK) == RB_T_IMEMO && (((flags) >> RB_IMEMO_SHIFT) & RB_IMEMO_MASK) == RB_IMEMO_ISEQ)

/* a heap object: 8-aligned, above the special constants (Qnil is 0x08 in 3.1, 0x04 from 3.2; Qundef 0x34 / 0x24) */
#define IS_HEAP(v) ((v) > 0x100 && ((v) & RB_IMMEDIATE_MASK) == 0)

/* body words read at once: the fields used end at first_lineno (byte 96 on 3.x); a body is bigger */
#define BODY_WORDS 16
#if BODY_PATHOBJ >= 8 * BODY_WORDS || BODY_LABEL >= 8 * BODY_WORDS || BODY_BASE_LABEL >= 8 * BODY_WORDS || \
    BODY_FIRST_LINENO >= 8 * BODY_WORDS || BODY_TYPE >= 8 * BODY_WORDS || BODY_ISEQ_ENCODED >= 8 * BODY_WORDS
#error "an ISeq body field lies past the words read"
#endif
#ifndef SDB_NA
#error "SDB_NA (not available: sdb_registry.h) is passed in with the layout (ebpf.bpf_cflags)"
#endif

#define EV_NEW 1
#define EV_MOVE 2

/* flags of an EV_NEW record */
#define F_TRUNCATED 1               /* a string was longer than STR_MAX: read this ISeq remotely */
#define F_UNREADABLE 2              /* a field could not be read: read this ISeq remotely */
#define F_NO_REALPATH 4             /* pathobj was [path, nil] */
#define F_BASE_IS_LABEL 8           /* base_label is the label's String: not copied twice */
#define F_REALPATH_IS_PATH 16       /* pathobj was a String: realpath is path, not copied twice */

struct event_hdr {
    u32 kind;                       /* EV_NEW or EV_MOVE */
    u32 flags;
    u64 time_ns;
    u64 addr;                       /* the new ISeq (EV_NEW); the old address (EV_MOVE) */
    u64 addr2;                      /* EV_MOVE: the new address; EV_NEW: the body's iseq_encoded */
    u32 type;
    s32 first_line;
    u16 len[NSTR];                  /* byte lengths of the strings that follow, back to back */
    u32 probe;                      /* which probe fired (index into the sidecar's probe list) */
    u32 tgid;                       /* the process */
};

struct event {
    struct event_hdr h;
    char data[DATA_MAX + STR_MAX];  /* room for NSTR strings; the extra STR_MAX keeps every copy in bounds */
};

BPF_PERCPU_ARRAY(scratch, struct event, 1);
/* One ring buffer, drained by the sidecar every few tens of ms: records are written without waking
 * it (a wake-up per ISeq costs the app more than the probe itself). */
BPF_RINGBUF_OUTPUT(events, RINGBUF_PAGES);
BPF_PERCPU_ARRAY(dropped, u64, 1);         /* records that did not fit */
/* [0]: ISeq records sent so far; [1]: the count at which the governor's budget is spent (0: never);
 * [2]: non-zero (the time of the decision) from a pause's start until the creation probes are attached
 * again: hits meanwhile send nothing and cost only the trap. The record that reaches [1] sets [2]
 * itself and wakes the reader, so a burst stops costing the app the moment it overdraws the budget,
 * not a wake-up and a poll later; the sidecar then takes the probes out. The sidecar sets [1], and
 * [2] for a pause it decides itself or to resume.
 * [3]: non-zero while the reader sleeps until records come: the next record clears it and wakes it.
 * Mapped by the sidecar (BPF_F_MMAPABLE): its samplers read [2] at every tick (a pause voids the names
 * eBPF gave before it; they name every ISeq anew at once, not when the sidecar's threads notice). */
BPF_F_TABLE("array", u32, u64, budget, 4, BPF_F_MMAPABLE);
/* The processes recorded (tgid -> 1): the sidecar adds each one before its probes are attached. */
BPF_HASH(targets, u32, u32, 4096);

static __always_inline u32 target_tgid(void)
{
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    return targets.lookup(&tgid) ? tgid : 0;
}

static __always_inline void emit(void *data, u64 size, u64 flags)
{
    u32 zero = 0, three = 3;
    u64 *d, *idle = budget.lookup(&three);
    if (idle && *idle) {
        *idle = 0;
        flags = BPF_RB_FORCE_WAKEUP;
    }
    if (events.ringbuf_output(data, size, flags) != 0) {
        d = dropped.lookup(&zero);
        if (d)
            (*d)++;
    }
}

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
    u64 h[4] = {}, flags, len, ptr;   /* flags, klass, then len/ptr or the embedded bytes: one read */
    u32 o = *off;
    ev->h.len[i] = 0;
    if (!IS_HEAP(str))              /* nil, false, immediates: no string */
        return;
    if (bpf_probe_read_user(h, sizeof(h), (void *)str) != 0 || (h[0] & RB_T_MASK) != RB_T_STRING) {
        *ok = 0;
        return;
    }
    flags = h[0];
    if (flags & (1ULL << RSTR_NOEMBED_BIT)) {
        len = h[(RSTR_HEAP_LEN / 8) & 3];
        ptr = h[(RSTR_HEAP_PTR / 8) & 3];
    } else {
#if RSTR_EMBED_LEN == SDB_NA
        len = (flags >> RSTR_EMBED_LEN_SHIFT) & RSTR_EMBED_LEN_MASK;
#else
        len = h[(RSTR_EMBED_LEN / 8) & 3];
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
    u64 a[5] = {}, n;               /* flags, klass, then the elements or len, aux, ptr: one read */
    if (bpf_probe_read_user(a, sizeof(a), (void *)ary) != 0) {
        *ok = 0;
        return 0;
    }
    if (a[0] & (1ULL << RARY_EMBED_BIT)) {
        n = (a[0] >> RARY_EMBED_LEN_SHIFT) & RARY_EMBED_LEN_MASK;
        if ((u64)idx >= n)
            return 0;
        if (RARY_EMBED_ARY == 16 && idx < 3)
            return a[2 + idx];
        return rd64(ary + RARY_EMBED_ARY + 8 * idx, ok);
    }
    n = a[(RARY_HEAP_LEN / 8) % 5];
    if ((u64)idx >= n)
        return 0;
    return rd64(a[(RARY_HEAP_PTR / 8) % 5] + 8 * idx, ok);
}

/* An ISeq is complete: a uretprobe on a function that returns one (iseq = its return value), or a
 * uprobe on one that gets one as its first argument (rb_iseq_translate_threaded_code, the last step
 * of every compilation). `probe` says which (see PROBE_FUNCTIONS). An ISeq without a label yet (the
 * binary loader sets it later) is left to the probe that sees it complete. */
static __always_inline int iseq_created(struct pt_regs *ctx, u32 probe, u64 iseq)
{
    u32 zero = 0, off = 0;
    int ok = 1;
    u64 body, flags, pathobj, pflags, path, realpath, label, ih[3];
    u64 b[BODY_WORDS];              /* the body's first words, type to first_lineno: one read */
    struct event *ev;
    u32 two = 2, tgid = target_tgid();
    u64 *paused;

    if (tgid == 0)
        return 0;
    if (iseq == 0)
        return 0;
    paused = budget.lookup(&two);
    if (paused && *paused)
        return 0;                   /* paused: the probe is being detached */
    ev = scratch.lookup(&zero);
    if (!ev)
        return 0;
    ev->h.kind = EV_NEW;
    ev->h.flags = 0;
    ev->h.time_ns = bpf_ktime_get_ns();
    ev->h.addr = iseq;
    ev->h.addr2 = 0;
    ev->h.probe = probe;
    ev->h.tgid = tgid;
    ev->h.type = 0;
    ev->h.first_line = 0;
    ev->h.len[0] = ev->h.len[1] = ev->h.len[2] = ev->h.len[3] = 0;

    if (bpf_probe_read_user(ih, sizeof(ih), (void *)iseq) != 0)
        ok = 0;
    flags = ih[0];
    body = ih[(ISEQ_BODY / 8) % 3];
    if (!ok || !IS_ISEQ(flags) || body == 0
            || bpf_probe_read_user(b, sizeof(b), (void *)body) != 0) {
        ev->h.flags |= F_UNREADABLE;
        goto send;
    }
    label = b[BODY_LABEL / 8];
    if (label == 0)
        return 0;
    /* the instruction buffer: the sampler names an ISeq from this event only if the ISeq it reads at
     * that address has this same buffer (a moved-in or later ISeq at the address has another) */
    ev->h.addr2 = b[BODY_ISEQ_ENCODED / 8];
    ev->h.type = (u32)(b[BODY_TYPE / 8] >> (8 * (BODY_TYPE % 8)));
#if FIRST_LINENO_FIXNUM
    ev->h.first_line = (s32)((s64)b[BODY_FIRST_LINENO / 8] >> RB_FIXNUM_SHIFT);
#else
    ev->h.first_line = (s32)(b[BODY_FIRST_LINENO / 8] >> (8 * (BODY_FIRST_LINENO % 8)));
#endif
    copy_string(ev, 0, label, &off, &ok);
    if (b[BODY_BASE_LABEL / 8] == label)
        ev->h.flags |= F_BASE_IS_LABEL;
    else
        copy_string(ev, 1, b[BODY_BASE_LABEL / 8], &off, &ok);
    pathobj = b[BODY_PATHOBJ / 8];
    pflags = IS_HEAP(pathobj) ? rd64(pathobj, &ok) : 0;
    if ((pflags & RB_T_MASK) == RB_T_ARRAY) {
        path = array_at(pathobj, 0, &ok);
        realpath = array_at(pathobj, 1, &ok);
        if (!IS_HEAP(realpath)) {
            ev->h.flags |= F_NO_REALPATH;
            realpath = 0;
        }
    } else {
        path = pathobj;
        realpath = 0;
        ev->h.flags |= F_REALPATH_IS_PATH;
    }
    copy_string(ev, 2, path, &off, &ok);
    copy_string(ev, 3, realpath, &off, &ok);
    if (!ok)
        ev->h.flags |= F_UNREADABLE;
send:
    if (off > DATA_MAX)
        off = DATA_MAX;
    {
        u32 one = 1;
        u64 *sent = budget.lookup(&zero), *wake_at = budget.lookup(&one), wake = BPF_RB_NO_WAKEUP;
        if (sent && wake_at && __sync_fetch_and_add(sent, 1) + 1 == *wake_at) {
            wake = BPF_RB_FORCE_WAKEUP;
            if (paused)
                *paused = ev->h.time_ns + 1;    /* records born after this one are not sent */
        }
        emit(ev, sizeof(struct event_hdr) + off, wake);
    }
    return 0;
}

/* Whether (src, dest) can be the mover's: src is an ISeq and dest is none (on entry to the mover,
 * dest is a free slot, T_NONE, or the T_MOVED a move back returns to: never a live ISeq). */
static __always_inline int is_move(u64 src, u64 dest)
{
    int ok = 1;
    u64 fs = rd64(src, &ok), fd;
    if (!ok || !IS_ISEQ(fs))
        return 0;
    fd = rd64(dest, &ok);
    return ok && !IS_ISEQ(fd);
}

/* uprobe on the GC's object mover gc_move(objspace, src, dest, src_slot_size, slot_size): reports
 * ISeqs only. Its specialised copy (gc_move.isra.0 and the like) may have dropped objspace: GCC
 * drops a parameter the body does not use: 3.3's and 3.4's gc_move read objspace->obj_to_id_tbl,
 * 4.0's reads objspace only in debug builds (gc/default/default.c), so 4.0.5's gc_move.constprop.0.isra.0
 * takes (src, dest, ...). Which one a build did is a fact of its compiler (-O0 or another compiler
 * keeps objspace), not of the Ruby version, so the probe tells them apart by what the registers
 * hold: with objspace, the other pair (arg1, arg2) is (objspace, src), whose dest is an ISeq;
 * without it, the other pair (arg2, arg3) is (dest, src_slot_size), whose src is no ISeq. At most
 * one pair is a move; were both (no build does that) nothing is sent: a pair taken wrongly would
 * carry a name to the wrong place. */
int iseq_moved(struct pt_regs *ctx)
{
    struct event_hdr h = {};
    u64 a1 = PT_REGS_PARM1(ctx), a2 = PT_REGS_PARM2(ctx), a3 = PT_REGS_PARM3(ctx), src, dest;
    u32 tgid = target_tgid();
    if (tgid == 0)
        return 0;
    int with_objspace = is_move(a2, a3), without = is_move(a1, a2);
    if (with_objspace == without)
        return 0;
    src = with_objspace ? a2 : a1;
    dest = with_objspace ? a3 : a2;
    h.kind = EV_MOVE;
    h.time_ns = bpf_ktime_get_ns();
    h.addr = src;
    h.addr2 = dest;
    h.tgid = tgid;
    emit(&h, sizeof(h), BPF_RB_NO_WAKEUP);
    return 0;
}

/* One entry point per creating probe, so an event says which probe named it (two in fact: one for a
 * uprobe_multi link, one for a perf event; see ebpf/symbolizer.py). */
PROBE_FUNCTIONS
