"""alloc_share: does the hook-free allocation profile hold? (issue 42, measured before building)

The design tried: no NEWOBJ hook; at each tick (1 kHz) read the VM's allocation counter (what
GC.stat(:total_allocated_objects) sums; the sidecar would read the same objspace words with
process_vm_readv) and give its change since the last tick to the stack of the thread holding the
GVL. Approximated in-process by programs/alloc_hook (AllocProbe): a native thread reads the counter
through rb_gc_stat at the tick; the GVL holder is the thread of the last RUBY_INTERNAL_THREAD_EVENT_
RESUMED (what the gem's thread-event hook already tracks from 3.3), and its "stack" is the method
programs/alloc_share.rb marked on entry: the leaf method, as the sidecar's sample would show it.
The truth is counted by the program itself (calls x allocations per call). Shares are of the four
methods' objects; a method's error is |sampled share - true share| in points (target: within 2).
Second table: each thread's allocations counted at GVL hand-overs (the RESUMED hook reads the counter
and gives the change to the thread that held the GVL until then) against the thread's truth.
Ruby 3.3+ only (3.1 has no thread-event hooks to know the GVL holder; 4.0's rb_gc_stat flushes the
running ractor's allocation cache, a write into the app from the sampler thread, so it is not run
there: see docs/memory-profiles.md for what 4.0 changes).

    .venv/bin/python benchmarks/alloc_share.py [--ruby PATH ...] [--runs N] [--seconds S]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import alloc_ext
import common
from common import fmt, summary

NAME = "alloc_share"
SCENARIOS = [("bursty", 1), ("bursty", 3), ("steady", 1), ("steady", 3)]
METHODS = ["objects", "strings", "arrays", "compute"]
# one core, the sampler thread included (it is in the process); the other core than
# alloc_hook_cost.py's target, so that the two can run at once without sharing a core
CPU = common.SAMPLER_CPU


def one(ruby, incdir, scenario, threads, seconds, hz) -> dict:
    cmd = common.taskset(CPU) + [ruby, "-I", incdir, os.path.join(common.PROGRAMS, "alloc_share.rb"),
                                              scenario, str(threads), str(seconds), str(hz)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed: {r.stderr.strip()}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def shares(d: dict) -> dict:
    total = sum(d.values()) or 1
    return {m: 100.0 * d[m] / total for m in METHODS}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ruby", dest="rubies", action="append", default=[], help="a Ruby 3.3+ to measure (repeatable)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--hz", type=int, default=1000)
    cfg = ap.parse_args()
    cfg.results, cfg.quick = common.RESULTS, False
    common.pin_self()
    rubies = [r for r in alloc_ext.rubies(cfg.rubies) if alloc_ext.version(r) >= "3.3" and alloc_ext.version(r) < "4"]
    rows, table, threads_table = [], [], []
    with tempfile.TemporaryDirectory(prefix="sdb-alloc-") as tmp:
        for ruby in rubies:
            incdir, version = alloc_ext.build(ruby, tmp), alloc_ext.version(ruby)
            for scenario, threads in SCENARIOS:
                runs = [one(ruby, incdir, scenario, threads, cfg.seconds, cfg.hz) for _ in range(cfg.runs)]
                truth = [shares(r["truth"]) for r in runs]
                sampled = [shares(r["sampled"]) for r in runs]
                worst = max(abs(s[m] - t[m]) for s, t in zip(sampled, truth) for m in METHODS)
                row = {"ruby": version, "scenario": scenario, "threads": threads, "runs": runs,
                       "worst_points": worst}
                for m in METHODS:
                    row[m] = {"truth": summary([t[m] for t in truth]), "sampled": summary([s[m] for s in sampled])}
                    table.append([version, scenario, threads, m, fmt(row[m]["truth"], 1), fmt(row[m]["sampled"], 1),
                                  f"{max(abs(s[m] - t[m]) for s, t in zip(sampled, truth)):.1f}"])
                rel = [abs(c - t) / t for r in runs for c, t in zip(r["thread_counted"], r["thread_truth"]) if t]
                row["thread_error"] = summary(rel)
                threads_table.append([version, scenario, threads, len(rel), f"{100 * max(rel):.2f}",
                                      f"{100 * row['thread_error']['median']:.3f}"])
                rows.append(row)
                print(f"{version} {scenario} x{threads}: worst {worst:.1f} points", file=sys.stderr, flush=True)
    t = common.markdown_table(["Ruby", "scenario", "threads", "method", "true share %", "sampled share %",
                               "worst error, points"], table)
    t2 = common.markdown_table(["Ruby", "scenario", "threads", "threads x runs", "worst error %", "median error %"],
                                threads_table)
    cfg.ruby = rubies[0] if rubies else "/usr/bin/ruby"
    path = common.write_result(cfg, NAME, {"runs": cfg.runs, "seconds": cfg.seconds, "hz": cfg.hz}, rows, t,
                               {"threads_table": t2})
    print(f"### alloc_share ({cfg.runs} runs of {cfg.seconds:g} s at {cfg.hz} Hz, median (min-max); "
          f"each program on CPU {CPU}, its sampler thread included)\n\n{t}\n\nPer thread, counted at GVL hand-overs:\n\n{t2}\n")
    print(f"results: {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
