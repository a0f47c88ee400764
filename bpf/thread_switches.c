/*
 * sdb kernel view: for each thread of the recorded processes, how often the kernel put it on a CPU and
 * whether it is on one now, in a BPF array the sidecar maps into its memory (no syscall to read it).
 *
 * Loaded by sidecar/sdb_sidecar/ebpf/kview.py with bcc, for Ruby 3.1 (no GVL hooks: the gem cannot tell
 * the sidecar which threads ran). The sampler reads a thread's stack again only if the thread was
 * put on a CPU since its last read, or was on one during it; without this view it asks procfs for
 * every thread at every tick (/proc/PID/task/TID/schedstat and stat: most of its CPU on 3.1).
 *
 * One raw tracepoint, sched_switch, on every context switch of the machine: for a task of no recorded
 * process, one lookup of prev's tgid in `targets`, one 4-byte read of next's tgid and its lookup.
 * The recorded processes (a process tree shares one view) are the keys of `targets`, added by the
 * sidecar. Constants (-D): TASK_PID, TASK_TGID (offsets of task_struct.pid and .tgid, read from the
 * kernel's BTF: no kernel headers involved); KV_SLOTS (a power of two). Threads of several processes
 * whose tids share a slot take it in turn: the sampler then asks procfs (the word holds the tid).
 *
 * Slot tid & (KV_SLOTS - 1) holds one 64-bit word: tid << 32 | switches << 2 | KV_UNKNOWN | KV_ON_CPU,
 * switches counting both ways (in and out). A program attached to sched_switch is not run for
 * every switch while another program attaches to the same tracepoint or leaves it
 * (benchmarks/kview_misses.py: 19 of 2,229 switch-ins missed while three other sidecars attached
 * and left, none of 2,004 with nothing else attaching; schedstat's own count has them all). With
 * the switch out counted as well, a missed switch-in still changes the word when the thread leaves
 * the CPU; and the sampler reuses a stack only for a thread the VM has blocked, after reading that
 * it still is (a woken thread sets th->status RUNNABLE before it runs Ruby).
 * The sidecar registers a thread it samples by storing tid << 32 | KV_UNKNOWN there (the thread may
 * be on a CPU already; its next switch, in or out, clears KV_UNKNOWN), unless another live thread
 * of the target holds the slot. The program updates a word only while it holds the switching
 * thread's tid, and the sidecar checks the tid at every read: a word rewritten by a switch of a
 * thread that just died, racing with a registration, reads as "not registered", never as another
 * thread's state. The count wraps within its 30 bits.
 */
#include <uapi/linux/ptrace.h>

#define KV_ON_CPU 1u
#define KV_UNKNOWN 2u
#define KV_SWITCH_IN 4u

BPF_F_TABLE("array", u32, u64, kview, KV_SLOTS, BPF_F_MMAPABLE);
BPF_HASH(targets, u32, u32, 4096);     /* tgid -> 1 */

RAW_TRACEPOINT_PROBE(sched_switch)
{
    /* TP_PROTO(bool preempt, struct task_struct *prev, struct task_struct *next, ...): prev is current */
    u64 pt = bpf_get_current_pid_tgid(), v, *e;
    u32 idx, lo, tid = 0, tgid = 0;
    void *next = (void *)ctx->args[2];

    tgid = pt >> 32;
    if (targets.lookup(&tgid)) {
        tid = (u32)pt;
        idx = tid & (KV_SLOTS - 1);
        e = kview.lookup(&idx);
        if (e) {
            v = *(volatile u64 *)e;
            if ((v >> 32) == tid)   /* switched out: counted too (see the header) */
                *(volatile u64 *)e = (v & 0xffffffff00000000ull)
                                     | (((u32)v & ~(KV_ON_CPU | KV_UNKNOWN)) + KV_SWITCH_IN);
        }
    }
    if (bpf_probe_read_kernel(&tgid, sizeof(tgid), next + TASK_TGID) != 0 || !targets.lookup(&tgid))
        return 0;
    if (bpf_probe_read_kernel(&tid, sizeof(tid), next + TASK_PID) != 0)
        return 0;
    idx = tid & (KV_SLOTS - 1);
    e = kview.lookup(&idx);
    if (!e)
        return 0;
    v = *(volatile u64 *)e;
    if ((v >> 32) != tid)
        return 0;
    lo = (((u32)v & ~KV_UNKNOWN) | KV_ON_CPU) + KV_SWITCH_IN;
    *(volatile u64 *)e = (v & 0xffffffff00000000ull) | lo;
    return 0;
}
