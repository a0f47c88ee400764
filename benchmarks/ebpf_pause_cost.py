"""ebpf_pause_cost: what one pause of the eBPF symbolizer's creation probes costs (its governor,
sidecar/sdb_sidecar/ebpf/symbolizer.py), on the sidecar and on the target.

The target (programs/eval_loop.rb) evaluates methods without pause and counts them per 10 ms slice.
This process (root, the sidecar's own code) attaches the symbolizer to it with every ISeq probed,
then, CYCLES times: waits, detaches the creation probes as a pause does, waits, attaches them again.
Sidecar side: wall and CPU time of a detach and of an attach (process CPU, all threads but the
reader, which drains its backlog of events all along). Target side:
evals per 10 ms slice while attached, while detaching (the kernel is still closing the probes),
detached, and while attaching, and the longest slice of each phase (a slice ends at the first eval
after 10 ms: one eval that stalls makes it long). Needs a quiet machine: on a shared one, stalls of
the same length show up with no detach at all. The target runs on one core, this process on another.

The stall a detach costs the app: how long the target's thread was asleep (off a CPU without waiting
for one: its 10 ms slices' wall time less their CPU time and run-queue delay, which the target takes
itself) in the slices that overlap the detach of its probes, median and spread over the cycles; beside
it the same measure per second while detached and nothing happens (the machine's own noise). Quiet and
beside two `yes` (LOADS; started here, on every core: the target then waits for a CPU, which is not counted
as asleep; a stall is time it could not run at all). The old kernel took a busy uprobe out while
holding the lock each hit takes, for an RCU grace period: 10-30 ms asleep at every detach."""
from __future__ import annotations

import multiprocessing
import os
import resource
import statistics
import sys
import time

import common

NAME = "ebpf_pause_cost"
PHASES = ("attached", "detaching", "detached", "attaching")
LOADS = (0, 2)          # `yes` processes beside it: quiet, every core shared


def cpu_s(reader_tid: int = 0) -> float:
    """CPU seconds of this process (ended threads included), less the eBPF reader thread's: it drains
    a backlog of events all along (every ISeq probed), which is not the cost of a pause."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    reader = 0.0
    if reader_tid:
        try:
            with open(f"/proc/self/task/{reader_tid}/schedstat") as f:
                reader = int(f.read().split()[0]) / 1e9
        except OSError:
            pass
    return r.ru_utime + r.ru_stime - reader


def cycles_on(cfg, cycles: int, wait_s: float, slack_s: float) -> tuple:
    """One target, the symbolizer attached with every ISeq probed, `cycles` detach/attach cycles:
    (marks, sidecar's (wall, cpu) ms per detach and per attach, the target's slices, probes, stalls()). The target evaluates for as long as
    the cycles take with slack_s each for the detach and the attach (more under load)."""
    from sdb_sidecar.ebpf.symbolizer import EbpfSymbolizer
    from sdb_sidecar.target.target import open_target
    seconds = 0.5 + cycles * (2 * wait_s + slack_s) + 0.5
    marks, det, att = [], [], []
    with common.ruby_target(cfg, "eval_loop.rb", f"{seconds:.2f}", stdin=True) as target:
        sym = EbpfSymbolizer(target.pid, open_target(target.pid).registry.layout, max_rate=0)
        sym.start()
        try:
            target.stdin.write("go\n")
            target.stdin.flush()
            time.sleep(0.5)
            rt = sym._thread.native_id
            for _ in range(cycles):
                time.sleep(wait_s)
                c0, a = cpu_s(rt), time.monotonic_ns()
                sym._detach_creators()
                c1, b = cpu_s(rt), time.monotonic_ns()
                time.sleep(wait_s)
                c2, c = cpu_s(rt), time.monotonic_ns()
                sym._attach_all()
                c3, d = cpu_s(rt), time.monotonic_ns()
                marks.append((a, b, c, d))
                det.append(((b - a) / 1e6, (c1 - c0) * 1e3))
                att.append(((d - c) / 1e6, (c3 - c2) * 1e3))
            slices = []
            for line in target.stdout:
                if line.startswith("done"):
                    break
                t0, n, asleep = line.split()
                slices.append((int(t0), int(n), int(asleep)))
        finally:
            probes = [p.symbol for p in sym.obj.creators] if sym.obj else []
            sym.close()
    return marks, det, att, slices, probes, stalls(marks, slices)


def cycles_apart(cfg, *args) -> tuple:
    """cycles_on in a Python process of its own: one symbolizer a process, as in the sidecar (a second
    one, made and closed after the first in the same process, made it crash at its exit, in bcc's
    teardown, after 20 cycles)."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(cycles_on, (cfg, *args))


def stalls(marks, slices) -> dict:
    """The target's asleep ms in the slices that overlap each detach and each attach (the breakpoints
    come out in the detach's first millisecond), and per second of the slices within each detached
    phase (nothing happening: the machine's noise)."""
    spans = [(t0, t1, z) for (t0, _, z), (t1, _, _) in zip(slices, slices[1:])]
    out = {"detach": [], "attach": [], "detached_per_s": []}
    for a, b, c, d in marks:
        out["detach"].append(sum(z for t0, t1, z in spans if t0 < b and t1 > a) / 1e6)
        out["attach"].append(sum(z for t0, t1, z in spans if t0 < d and t1 > c) / 1e6)
        idle = [(t1 - t0, z) for t0, t1, z in spans if b <= t0 and t1 <= c]
        if idle:
            out["detached_per_s"].append(sum(z for _, z in idle) / 1e6 / (sum(w for w, _ in idle) / 1e9))
    return out


def run(cfg) -> str:
    sys.path.insert(0, os.path.join(common.ROOT, "sidecar"))
    from sdb_sidecar.ebpf.bpfload import EbpfUnavailable, check_available
    try:
        check_available()
    except EbpfUnavailable as e:
        raise RuntimeError(f"no eBPF here: {e}") from None
    common.pin_self()
    cycles = 3 if cfg.quick else (cfg.rounds or 20)
    wait_s = 0.4
    stalls = {}
    for n in LOADS:
        with common.hogs(n):
            got = cycles_apart(cfg, cycles, wait_s, 0.25 if n == 0 else 1.5)
        stalls[n] = got[5]
        if n == 0:
            marks, det, att, slices, probes, _ = got
    by_phase = {p: [] for p in PHASES}
    longest = {p: 0.0 for p in PHASES}      # ms: a slice lasts longer than 10 ms when one eval stalls
    lengths = {p: [] for p in PHASES}       # ms of every slice, to count stalls per second of each phase
    for (t0, n, _), (t1, _, _) in zip(slices[5:], slices[6:]):     # the first slices warm up
        phase = "attached"
        for a, b, c, d in marks:
            if a <= t0 < b:
                phase = "detaching"
            elif b <= t0 < c:
                phase = "detached"
            elif c <= t0 < d:
                phase = "attaching"
        by_phase[phase].append(n)
        longest[phase] = max(longest[phase], (t1 - t0) / 1e6)
        lengths[phase].append((t1 - t0) / 1e6)
    med = lambda xs: statistics.median(xs) if xs else float("nan")
    rows = [{"side": "sidecar", "what": "detach (pause)", "wall_ms": med([w for w, _ in det]),
             "cpu_ms": med([c for _, c in det])},
            {"side": "sidecar", "what": "attach (resume)", "wall_ms": med([w for w, _ in att]),
             "cpu_ms": med([c for _, c in att])}]
    rows += [{"side": "target", "what": p, "slices": len(by_phase[p]), "evals_per_10ms": med(by_phase[p]),
              "min": min(by_phase[p]) if by_phase[p] else None, "longest_slice_ms": longest[p],
              "seconds": sum(lengths[p]) / 1e3,
              "slices_over_20ms": sum(1 for x in lengths[p] if x > 20),
              "slices_over_50ms": sum(1 for x in lengths[p] if x > 50),
              "longest_3_ms": sorted(lengths[p])[-3:]} for p in PHASES]
    table = common.markdown_table(
        ["side", "what", "median", "detail"],
        [["sidecar", r["what"], f"{r['wall_ms']:.1f} ms wall", f"{r['cpu_ms']:.2f} ms CPU"] for r in rows[:2]] +
        [["target", f"evals / 10 ms, {r['what']}", f"{r['evals_per_10ms']:.0f}",
          f"{r['slices']} slices ({r['seconds']:.1f} s), min {r['min']}; slices > 20 ms: "
          f"{r['slices_over_20ms']}, > 50 ms: {r['slices_over_50ms']}; longest "
          f"{', '.join(f'{x:.0f}' for x in r['longest_3_ms'])} ms"] for r in rows[2:]])
    stall_rows, stall_table = [], []
    for n, st in stalls.items():
        row = {"side": "target", "what": "asleep", "hogs": n, **{k: common.summary(v) for k, v in st.items()}}
        stall_rows.append(row)
        stall_table.append(["quiet" if n == 0 else f"{n} `yes`", len(st["detach"]), common.fmt(row["detach"], 2),
                            common.fmt(row["attach"], 2), common.fmt(row["detached_per_s"], 2)])
    stall_md = common.markdown_table(["load", "cycles", "asleep per detach, ms", "asleep per attach, ms",
                                      "asleep per second detached (noise), ms"], stall_table)
    rows += stall_rows
    params = {"cycles": cycles, "wait_s": wait_s, "probes": probes, "loads": list(LOADS)}
    common.write_result(cfg, NAME, params, rows, table + "\n\n" + stall_md)
    return (f"### ebpf_pause_cost ({cycles} pause cycles, probes {', '.join(probes)}, medians; "
            f"{common.machine(cfg)['pinning']})\n\n{table}\n\n"
            f"The target's thread asleep while its probes come out (median, min-max over the cycles; the "
            f"table above is the quiet run's):\n\n{stall_md}\n")
