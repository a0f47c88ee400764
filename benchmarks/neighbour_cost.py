#!/usr/bin/env python3
"""What a recording costs a process sdb does not record (issue 43): a busy Ruby loop without the gem
(benchmarks/programs/spin_count.rb) alone on CPU 1 counts its iterations for MEASURE seconds, while
`attach` (in-context reads on, 1 kHz) records another busy Ruby program (spin_count.rb with the gem)
pinned with the sidecar to CPU 0. Configurations, in rotated order within each round: no recording
("none"), the sidecar of --old (a checkout whose in-context reads' timer is a cpu-clock event on every
CPU) and this checkout's (an event on each recorded thread). Prints the loop's iterations as a ratio
to the same round's "none" (median, min-max), the local timer interrupts a second on CPU 1 while
it counted (/proc/interrupts, LOC: every source's, other work on the machine included) and the runs a
second of the sidecar's in-context program (kernel.bpf_stats_enabled; each run is one interrupt of
its timer): counts, which do not move with the machine's load as times do. With the recorded program
busy on CPU 0, ~1,070 runs a second are its own; more are interrupts of other CPUs.

    .venv/bin/python benchmarks/neighbour_cost.py --gem-home build/gem-home [--old /work/main] [--rounds 5]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from in_context_cost import prog_stats

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAM = os.path.join(REPO, "benchmarks", "programs", "spin_count.rb")
CONFIGS = ("none", "per CPU (old)", "per thread")


def loc(cpu: int) -> int:
    with open("/proc/interrupts") as f:
        cpus = [int(c[3:]) for c in f.readline().split()]
        for line in f:
            parts = line.split()
            if parts and parts[0] == "LOC:":
                return int(parts[1 + cpus.index(cpu)])
    raise SystemExit("no LOC line in /proc/interrupts")


def one(ruby: str, gem_home: str, config: str, repo: str, warmup: float, measure: float) -> tuple:
    """(the neighbour's iterations, CPU 1's local timer interrupts a second while it counted, the
    in-context program's runs a second meanwhile)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SDB_", "RUBY", "GEM_"))}
    env["GEM_HOME"] = env["GEM_PATH"] = gem_home
    recorded = subprocess.Popen(["taskset", "-c", "0", ruby, "-rsdb", PROGRAM, "600", "1"], stdout=subprocess.PIPE,
                                text=True, env=env)
    assert recorded.stdout.readline().strip() == "ready"
    sidecar = None
    if config != "none":
        sidecar = subprocess.Popen(["taskset", "-c", "0", os.path.join(repo, ".venv", "bin", "python"), "-m",
                                    "sdb_sidecar.cli", "attach", "--pid", str(recorded.pid), "-o",
                                    "/tmp/sdb-neighbour-cost.msgpack", "-q", "--duration", "600"],
                                   cwd=repo, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while sidecar is not None and prog_stats(sidecar.pid) == (0, 0) and time.monotonic() < deadline:
        time.sleep(0.2)         # the in-context reads compiled and loaded (slow on a loaded machine)
    time.sleep(warmup / 2)
    neighbour = subprocess.Popen(["taskset", "-c", "1", ruby, PROGRAM, str(warmup / 2), str(measure)],
                                 stdout=subprocess.PIPE, text=True, env=env)
    assert neighbour.stdout.readline().strip() == "ready"
    time.sleep(warmup / 2)
    l0, t0, p0 = loc(1), time.monotonic(), prog_stats(sidecar.pid) if sidecar else (0, 0)
    count = int(neighbour.stdout.readline())
    dt = time.monotonic() - t0
    rate = (loc(1) - l0) / dt
    runs = ((prog_stats(sidecar.pid)[1] - p0[1]) / dt) if sidecar else 0.0
    neighbour.wait()
    for p in (sidecar, recorded):
        if p is not None:
            p.terminate() if p is recorded else p.send_signal(2)
            p.wait(timeout=60)
    return count, rate, runs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ruby", default="/usr/bin/ruby")
    ap.add_argument("--gem-home", required=True)
    ap.add_argument("--old", default="/work/main", help="a checkout with the per-CPU timer, its .venv set up")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=float, default=6.0)
    ap.add_argument("--measure", type=float, default=5.0)
    a = ap.parse_args()
    subprocess.run(["sysctl", "-qw", "kernel.bpf_stats_enabled=1"], check=False)
    repos = {"none": REPO, "per CPU (old)": a.old, "per thread": REPO}
    ratios = {c: [] for c in CONFIGS}
    rates = {c: [] for c in CONFIGS}
    runs = {c: [] for c in CONFIGS}
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {a.rounds} rounds, {a.ruby}, "
          f"warm-up {a.warmup:g} s, {a.measure:g} s measured; old: {a.old}")
    for r in range(a.rounds):
        order = CONFIGS[r % 3:] + CONFIGS[:r % 3]
        got = {c: one(a.ruby, os.path.abspath(a.gem_home), c, repos[c], a.warmup, a.measure) for c in order}
        for c in CONFIGS:
            ratios[c].append(got[c][0] / got["none"][0])
            rates[c].append(got[c][1])
            runs[c].append(got[c][2])
        print(f"round {r}: " + ", ".join(f"{c} {got[c][0]:,} ({got[c][1]:.0f} LOC/s, {got[c][2]:.0f} runs/s)"
                                         for c in CONFIGS), flush=True)
    for c in CONFIGS:
        v, w, x = ratios[c], rates[c], runs[c]
        print(f"{c:14} iterations / none: {statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f}); "
              f"CPU 1 LOC/s {statistics.median(w):.0f} ({min(w):.0f}-{max(w):.0f}); "
              f"program runs/s {statistics.median(x):.0f} ({min(x):.0f}-{max(x):.0f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
