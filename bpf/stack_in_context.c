/*
 * sdb in-context stack reads: on a tick of a recorded thread (a cpu-clock perf event on that thread,
 * at the sampling rate of its time on a CPU: sidecar/sdb_sidecar/ebpf/threadtimers.py), if it is a thread
 * the sampler asked for, copy its control frames and the top of its VM stack into its slot
 * (bpf/ctxslot.h, put before this text). The checks below stay: a thread is timed from the
 * registry's list, its slot may be another thread's, and its process may have left the recording.
 *
 * Why: a stack copied from another CPU while its thread runs changes during the copy (a few us);
 * methods whose calls are shorter than that lose their samples to their callers, whatever rule
 * picks the frames kept (benchmarks/RESULTS.md, real_check_spread). Read here, in the interrupt
 * of the thread's own CPU, the thread does not move while it is read: the stack is the one it had
 * at the tick. The sampler takes the newest such read of a thread at its own tick, and reads the
 * rest (threads off a CPU, which do not move; deeper frames' env words; names) from outside, as
 * before. Nothing is written to the target; reads that fault leave the slot without frames.
 *
 * Constants (-D): CTX_SLOTS (a power of two). The Ruby's offsets are not constants: each recorded
 * process's are the value of its key in ctx_targets, so the program is compiled before any Ruby is
 * known (incontext.prepare: `record` compiles it while the program boots).
 */
/* no kernel header: the compile is what delays the first in-context read (0.35 s against 1 s with
 * uapi/linux/ptrace.h and bpf_perf_event.h here); the context is not read */
struct bpf_perf_event_data;

struct ctx_target {                     /* from the process's layout row */
    u64 thread_ec;                      /* rb_thread_t.ec */
    u64 ec_vm_stack;                    /* rb_execution_context_t.vm_stack, .vm_stack_size, .cfp */
    u64 ec_vm_stack_size;
    u64 ec_cfp;
    u64 cfp_sp;                         /* rb_control_frame_t.sp */
    u64 gc_addr;                        /* the process's GC word (4 bytes), 0: none */
    u64 running_ec_addr;                /* 3.1: &running_ec (8 bytes), 0: none */
};

BPF_F_TABLE("array", u32, struct sdb_ctx_slot, ctx_slots, CTX_SLOTS, BPF_F_MMAPABLE);
BPF_HASH(ctx_targets, u32, struct ctx_target, 4096);     /* tgid -> its offsets: the processes recorded */

/* Copies the len bytes at src, at most max of them, into dst: how many it copied, 0 where none could
 * be read. Inlined, so that the verifier sees each call's max as the bound of the read's size. */
static __always_inline u64 read_at_most(void *dst, u64 max, u64 src, u64 len)
{
    if (len > max)
        len = max;
    if (len == 0 || bpf_probe_read_user(dst, len, (void *)src) != 0)
        return 0;
    return len;
}

int on_cpu_clock(struct bpf_perf_event_data *ctx)
{
    u64 pt = bpf_get_current_pid_tgid();
    u32 tgid = pt >> 32, tid = (u32)pt, idx;
    u64 th, ec = 0, vm_stack, size, cfp, end, n, sp, lo, o_vs, o_size, o_cfp, o_sp;
    struct sdb_ctx_slot *s;
    struct ctx_target *t = ctx_targets.lookup(&tgid);

    if (!t)
        return 0;
    idx = tid & (CTX_SLOTS - 1);
    s = ctx_slots.lookup(&idx);
    if (!s || *(volatile u64 *)&s->reg_tid != tid)
        return 0;
    th = *(volatile u64 *)&s->reg_th;
    __sync_fetch_and_add(&s->seq, 1);
    s->tid = tid;
    s->t_ns = bpf_ktime_get_ns();
    s->nbytes = 0;
    s->win_len = 0;
    /* whether the VM is in GC, at this moment: the tick's own read of it comes up to a tick later,
     * and gave GC's time to whatever allocated (and others' to GC) */
    s->gc_ok = 0;
    s->gc_word = 0;
    s->running_ec = 0;
    if (t->gc_addr) {
        u32 w = 0;
        if (bpf_probe_read_user(&w, sizeof(w), (void *)t->gc_addr) == 0) {
            s->gc_word = w;
            s->gc_ok = 1;
        }
        if (t->running_ec_addr && bpf_probe_read_user(&s->running_ec, 8, (void *)t->running_ec_addr) != 0)
            s->gc_ok = 0;
    }
    /* word offsets below 64 (incontext.py checks them): masked, the verifier sees their bounds */
    o_vs = t->ec_vm_stack & 0x38;
    o_size = t->ec_vm_stack_size & 0x38;
    o_cfp = t->ec_cfp & 0x38;
    o_sp = t->cfp_sp & 0x38;
    if (bpf_probe_read_user(&ec, sizeof(ec), (void *)(th + t->thread_ec)) != 0 || ec == 0)
        goto out;
    s->ec = ec;
    if (bpf_probe_read_user(s->hdr, SDB_CTX_HDR_BYTES, (void *)ec) != 0)
        goto out;
    vm_stack = *(u64 *)(s->hdr + o_vs);
    size = *(u64 *)(s->hdr + o_size);
    cfp = *(u64 *)(s->hdr + o_cfp);
    if (size > (1ull << 28))
        goto out;
    end = vm_stack + size * 8;
    if (vm_stack == 0 || cfp < vm_stack || cfp >= end)
        goto out;
    n = read_at_most(s->frames, SDB_CTX_FRAME_BYTES, cfp, end - cfp);
    if (n == 0)
        goto out;
    s->nbytes = n;
    /* the innermost frame's sp: the ep words of the frames below it are under it */
    if (n < o_sp + 8)
        goto out;
    sp = *(u64 *)(s->frames + o_sp);
    if (sp > cfp || sp <= vm_stack)
        goto out;
    lo = sp > vm_stack + SDB_CTX_WIN_BYTES ? sp - SDB_CTX_WIN_BYTES : vm_stack;
    n = read_at_most(s->win, SDB_CTX_WIN_BYTES, lo, sp - lo);
    if (n == 0)
        goto out;
    s->win_lo = lo;
    s->win_len = n;
out:
    __sync_fetch_and_add(&s->seq, 1);
    return 0;
}
