#!/usr/bin/env python3
"""What the in-context copies (bpf/stack_in_context.c) cost the app: a busy Ruby loop 30 calls deep
(benchmarks/programs/spin_count.rb) counts its iterations for MEASURE seconds after a warm-up that
covers the sidecar's start and the program's compile, with no sidecar, with `attach --no-in-context`
(stacks copied from outside only) and with `attach` (in context), in rotated order within each
round; the app on CPU 1, the sidecar on CPU 0. Prints each configuration's iterations as a ratio to
the same round's "none" (median, min-max) and the BPF program's own time per run from the kernel's
statistics (kernel.bpf_stats_enabled: every run, on every CPU, the early returns included).
--rate: the sidecar's sampling rate (the reads follow it up to incontext.MAX_RATE_HZ).

    .venv/bin/python benchmarks/in_context_cost.py --ruby /usr/bin/ruby --gem-home build/gem-home [--rounds 5] [--rate 1000]
"""
from __future__ import annotations

import argparse
import glob
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAM = os.path.join(REPO, "benchmarks", "programs", "spin_count.rb")
CONFIGS = ("none", "outside", "in context")


def prog_stats(pid: int) -> tuple:
    """(run_time_ns, run_cnt) of the perf-event BPF programs process pid holds (0, 0: none)."""
    ns = cnt = 0
    for f in glob.glob(f"/proc/{pid}/fdinfo/*"):
        try:
            text = open(f).read()
        except OSError:
            continue
        if "prog_type:\t7" not in text:      # BPF_PROG_TYPE_PERF_EVENT
            continue
        fields = dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)
        ns += int(fields.get("run_time_ns", 0))
        cnt += int(fields.get("run_cnt", 0))
    return ns, cnt


def one(ruby: str, gem_home: str, config: str, warmup: float, measure: float, rate: float) -> tuple:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SDB_", "RUBY", "GEM_"))}
    env["GEM_HOME"] = env["GEM_PATH"] = gem_home
    argv = ["taskset", "-c", "1", ruby, *(["-rsdb"] if config != "none" else []), PROGRAM, str(warmup), str(measure)]
    target = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
    assert target.stdout.readline().strip() == "ready"
    sidecar, stats = None, (0, 0)
    if config != "none":
        sidecar = subprocess.Popen(["taskset", "-c", "0", sys.executable, "-m", "sdb_sidecar.cli", "attach", "--pid",
                                    str(target.pid), "-o", "/tmp/sdb-in-context-cost.msgpack", "-q", "--rate", f"{rate:g}",
                                    "--duration", str(warmup + measure + 5),
                                    *(["--no-in-context"] if config == "outside" else [])],
                                   cwd=REPO, stderr=subprocess.DEVNULL)
    time.sleep(warmup)
    before = prog_stats(sidecar.pid) if sidecar else (0, 0)
    count = int(target.stdout.readline())
    after = prog_stats(sidecar.pid) if sidecar else (0, 0)
    target.wait()
    if sidecar:
        sidecar.wait(timeout=60)
        stats = (after[0] - before[0], after[1] - before[1])
    return count, stats


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ruby", default="/usr/bin/ruby")
    ap.add_argument("--gem-home", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--measure", type=float, default=5.0)
    ap.add_argument("--rate", type=float, default=1000.0, help="the sidecar's --rate (default 1000)")
    a = ap.parse_args()
    subprocess.run(["sysctl", "-qw", "kernel.bpf_stats_enabled=1"], check=False)
    ratios = {c: [] for c in CONFIGS}
    per_run = []
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {a.rounds} rounds, {a.ruby}, "
          f"warm-up {a.warmup:g} s, {a.measure:g} s measured, --rate {a.rate:g}")
    for r in range(a.rounds):
        order = CONFIGS[r % 3:] + CONFIGS[:r % 3]
        got = {c: one(a.ruby, os.path.abspath(a.gem_home), c, a.warmup, a.measure, a.rate) for c in order}
        for c in CONFIGS:
            ratios[c].append(got[c][0] / got["none"][0])
        ns, cnt = got["in context"][1]
        if cnt:
            per_run.append(ns / cnt)
        print(f"round {r}: " + ", ".join(f"{c} {got[c][0]:,}" for c in CONFIGS)
              + (f"; BPF {cnt:,} runs, {ns / cnt:.0f} ns a run" if cnt else ""), flush=True)
    for c in CONFIGS:
        v = ratios[c]
        print(f"{c:11} iterations / none: {statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f})")
    if per_run:
        print(f"BPF program: {statistics.median(per_run):.0f} ns a run ({min(per_run):.0f}-{max(per_run):.0f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
