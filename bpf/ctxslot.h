/*
 * One thread's in-context stack read: a slot of stack_in_context.c's array, mapped into the
 * sidecar (BPF_F_MMAPABLE). The same text is put at the head of the BPF program by
 * sidecar/sdb_sidecar/ebpf/incontext.py, so the program and the sampler (_reads.pyx) read one layout.
 *
 * The sampler writes reg_th, then reg_tid (the thread it wants read: slot = tid & (slots - 1));
 * the program, on a CPU tick while that thread runs there, writes the rest between two increments
 * of seq (odd while it writes). The sampler copies what it needs and keeps it only if seq was even
 * and the same before and after. A thread runs on one CPU at a time: one writer per slot.
 */
#ifndef SDB_CTXSLOT_H
#define SDB_CTXSLOT_H

#define SDB_CTX_HDR_BYTES 64            /* bytes of the ec read: vm_stack, its size, cfp (EC_SPAN) */
#define SDB_CTX_FRAME_BYTES 16384       /* control frames: 256 of 64 bytes (292 of 56) */
#define SDB_CTX_WIN_BYTES 16384         /* the VM stack below the innermost frame's sp: the ep words */

struct sdb_ctx_slot {
    unsigned long long reg_tid;         /* the sampler's: the thread it wants read (0: none) */
    unsigned long long reg_th;          /*   and its rb_thread_t */
    unsigned long long seq;             /* the program's: odd while it writes */
    unsigned long long tid;             /* the thread read */
    unsigned long long t_ns;            /* when (CLOCK_MONOTONIC, bpf_ktime_get_ns) */
    unsigned long long ec;              /* its th->ec then */
    unsigned long long nbytes;          /* bytes of control frames from ec->cfp in frames (0: none) */
    unsigned long long win_lo;          /* win holds win_len bytes of the VM stack from win_lo */
    unsigned long long win_len;
    unsigned long long gc_ok;           /* 1: the two words below were read with the stack */
    unsigned long long gc_word;         /* the GC word then: the gem's gc_active (3.3+), objspace->flags (3.1) */
    unsigned long long running_ec;      /* 3.1: the ec that last took the GVL then (else 0) */
    unsigned long long pad;
    unsigned char hdr[SDB_CTX_HDR_BYTES];
    unsigned char frames[SDB_CTX_FRAME_BYTES];
    unsigned char win[SDB_CTX_WIN_BYTES];
};

#endif
