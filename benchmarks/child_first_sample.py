"""child_first_sample: how long after a process tree's child is born its recording has its first sample.

`sdb-sidecar attach --pid PARENT` (eBPF on: its compile runs beside the sampling for the first second
or more) on tests/programs/forking_tree.rb; once the parent has samples, two children are forked,
one right after the other, while eBPF still compiles. For each child: from its T0 (CLOCK_MONOTONIC
after the gem's fork hook published its registry, printed by the child) to its first sample in the
trace, split at its process record (when the sidecar had found and opened it). Quiet, beside two
and beside eight `yes > /dev/null` (started here), interleaved, ROUNDS rounds. Busy run 10
(2026-11-28) lost a child's first ~0.7 s: its sampler's thread (a Python thread then) had to be
created (the mmap lock, held by a thread of ours off the CPU), take the GIL and be given a CPU before
it could ask to be real-time (Sampler.start, prepare_thread)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time

import common

NAME = "child_first_sample"
SIDECAR = [sys.executable, "-m", "sdb_sidecar.cli"]
HOGS = (0, 2, 8)         # `yes` processes beside it: none, the busy machine, a crowded one
PROGRAM = os.path.join("..", "..", "tests", "programs", "forking_tree.rb")   # from benchmarks/programs


def first_samples(path: str):
    """(pid -> its first sample's time, pid -> its first process record's time, the eBPF attached time
    or None), CLOCK_MONOTONIC ns."""
    from sdb_trace import TraceError, TraceReader
    pid_of, first, found, cur, attached = {}, {}, {}, 0, None
    try:
        with TraceReader(path) as r:
            for rec in r.records():
                t = rec["t"]
                if t == "in":
                    cur = rec["proc"]
                elif t == "process":
                    pid_of[rec["proc"]] = rec["pid"]
                    found.setdefault(rec["pid"], rec["at_ns"])
                elif t == "samples" and rec["dt_ns"]:
                    at = rec["base_ns"] + min(rec["dt_ns"])
                    pid = pid_of.get(cur)
                    if pid is not None and (pid not in first or at < first[pid]):
                        first[pid] = at
                elif t == "ebpf_attached" and attached is None:
                    attached = rec["at_ns"]
    except TraceError:
        pass
    return first, found, attached


def one_round(cfg, out: str):
    """For each of two children, ms: (its first sample - its T0, found (its process record) - T0,
    first sample - found; forked before eBPF was attached)."""
    with common.ruby_target(cfg, PROGRAM, stdin=True) as target:
        sidecar = subprocess.Popen(SIDECAR + ["attach", "--pid", str(target.pid), "-q", "-d", "600", "-o", out],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            while target.pid not in first_samples(out)[0]:
                if sidecar.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"attach wrote no sample: {sidecar.stderr.read()[-300:]}")
                time.sleep(0.005)
            kids = {}
            for name in ("a", "b"):
                target.stdin.write(f"fork {name}\n")
                target.stdin.flush()
                line = target.stdout.readline().split()
                kids[int(line[2])] = int(line[3])
            for name in ("a", "b"):
                target.stdin.write(f"go {name}\n")
                target.stdin.flush()
            deadline = time.monotonic() + 60
            while not all(pid in first_samples(out)[0] for pid in kids) and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.2)
        finally:
            sidecar.send_signal(signal.SIGINT)
            sidecar.wait(120)
    first, found, attached = first_samples(out)
    missing = [pid for pid in kids if pid not in first]
    if missing:
        raise RuntimeError(f"no sample of children {missing} in 60 s")
    return [((first[pid] - t0) / 1e6, (found[pid] - t0) / 1e6, (first[pid] - found[pid]) / 1e6,
             attached is None or attached > t0) for pid, t0 in kids.items()]


def run(cfg) -> str:
    rounds = 2 if cfg.quick else (cfg.rounds or 10)
    got = {n: [] for n in HOGS}
    before_ebpf = dict.fromkeys(got, 0)
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for n in got:           # interleaved
                with common.hogs(n):
                    for *delays, early in one_round(cfg, os.path.join(tmp, f"tree-{n}-{r}.msgpack")):
                        got[n].append(delays)
                        before_ebpf[n] += early
    rows, table_rows = [], []
    for n, rounds_got in got.items():
        first, found, started = (common.summary([d[i] for d in rounds_got]) for i in range(3))
        rows.append({"hogs": n, "first_sample_ms": first, "found_ms": found, "first_after_found_ms": started,
                     "children": len(rounds_got), "forked_before_ebpf": before_ebpf[n]})
        table_rows.append(["quiet" if n == 0 else f"{n} `yes`", len(rounds_got), before_ebpf[n], common.fmt(first, 1),
                           common.fmt(found, 1), common.fmt(started, 1)])
    table = common.markdown_table(["load", "children", "forked while eBPF compiled",
                                   "first sample after the child's T0, ms (median, min-max)",
                                   "found (its process record)", "first sample after found"], table_rows)
    common.write_result(cfg, NAME, {"rounds": rounds}, rows, table)
    return f"### child_first_sample ({rounds} rounds, interleaved; attach, eBPF on)\n\n{table}\n"
