"""alloc_hook_cost: what a NEWOBJ hook costs the allocating thread, before sdb builds one (issue 42).

programs/alloc_loop.rb, each run a fresh Ruby pinned to the target core with taskset, configurations
interleaved round by round (order rotated): none (no hook; the extension not even loaded); removed
(the hook installed and removed before the loop: what the app pays while nobody records); skip (a
NEWOBJ hook whose callback only counts a geometric skip down by one: the floor of any hook); sample
(counts down by the object's slot size, mean 512 KiB, and at a sample copies 64 control frames'
iseq/pc/ep[-2] words, the class and the size to a static ring: what the gem would do); heap (sample,
and each sampled object kept in a table a FREEOBJ hook looks every freed object up in). Workloads:
micro (`Object.new` in a while loop) and mixed (a string/array/hash method mix with some arithmetic).
The loop's CPU time (CLOCK_PROCESS_CPUTIME_ID) is the measure: this machine is shared and loaded, so
wall time waits on others; wall is kept in the JSON. perf's instruction counter is not available in
this VM (`perf stat -e instructions`: not supported). Ratio = CPU / the same round's none.

    .venv/bin/python benchmarks/alloc_hook_cost.py [--ruby PATH ...] [--rounds N] [--quick]
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

NAME = "alloc_hook_cost"
CONFIGS = ["none", "removed", "skip", "sample", "heap"]
SIZES = {"micro": 2_000_000, "mixed": 150_000}  # ~0.6 s and ~1 s of CPU on 3.1 here


def one(ruby: str, incdir: str, mode: str, workload: str, n: int, cpu: int) -> dict:
    cmd = common.taskset(cpu) + [ruby, "-I", incdir, os.path.join(common.PROGRAMS, "alloc_loop.rb"),
                                              mode, workload, str(n)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed: {r.stderr.strip()}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def measure(ruby: str, incdir: str, workload: str, rounds: int, scale: float, configs: list, cpu: int) -> dict:
    n = max(1, int(SIZES[workload] * scale))
    raw = {c: [] for c in configs}
    for k in range(rounds):
        order = configs[k % len(configs):] + configs[:k % len(configs)]
        got = {c: one(ruby, incdir, c, workload, n, cpu) for c in order}
        for c in configs:
            got[c]["ratio"] = got[c]["cpu"] / got["none"]["cpu"]
            raw[c].append(got[c])
    return raw


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ruby", dest="rubies", action="append", default=[], help="a Ruby to measure (repeatable)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 round, a tenth of the work")
    ap.add_argument("--config", dest="configs", action="append", choices=CONFIGS,
                    help="measure only these (repeatable; none is always measured: the ratios need it)")
    ap.add_argument("--workload", dest="workloads", action="append", choices=sorted(SIZES))
    ap.add_argument("--cpu", type=int, default=common.TARGET_CPU, help="the core the Rubies run on")
    ap.add_argument("--tag", default="", help="appended to the result file's name (a partial run)")
    cfg = ap.parse_args()
    configs = ["none"] + [c for c in CONFIGS[1:] if c in cfg.configs] if cfg.configs else CONFIGS
    cfg.results = common.RESULTS
    common.pin_self()
    rounds, scale = (1, 0.1) if cfg.quick else (cfg.rounds, 1.0)
    rows, table = [], []
    with tempfile.TemporaryDirectory(prefix="sdb-alloc-") as tmp:
        for ruby in alloc_ext.rubies(cfg.rubies):
            cfg.ruby = ruby
            incdir = alloc_ext.build(ruby, tmp)
            version = alloc_ext.version(ruby)
            for workload in cfg.workloads or SIZES:
                raw = measure(ruby, incdir, workload, rounds, scale, configs, cfg.cpu)
                for c in configs:
                    rs = raw[c]
                    per = [r["cpu"] / r["allocs"] * 1e9 for r in rs]
                    row = {"ruby": version, "workload": workload, "config": c, "cpu": summary([r["cpu"] for r in rs]),
                           "ratio": summary([r["ratio"] for r in rs]), "ns_per_alloc": summary(per),
                           "wall": summary([r["wall"] for r in rs]), "rounds": rs}
                    rows.append(row)
                    extra = (rs[0]["calls"], rs[0]["samples"])
                    table.append([version, workload, c, fmt(row["cpu"], 3), fmt(row["ratio"], 3),
                                  fmt(row["ns_per_alloc"], 1), f"{rs[0]['allocs']:,}", f"{extra[0]:,} / {extra[1]:,}"])
                print(f"{version} {workload} done", file=sys.stderr, flush=True)
    t = common.markdown_table(["Ruby", "workload", "config", "loop CPU s", "ratio to none", "CPU ns / allocation",
                               "allocations", "hook calls / samples"], table)
    cfg.ruby = "/usr/bin/ruby"
    path = common.write_result(cfg, NAME + (f"-{cfg.tag}" if cfg.tag else ""), {"rounds": rounds, "sizes": {k: int(v * scale) for k, v in SIZES.items()}},
                               rows, t)
    print(f"### alloc_hook_cost (median of {rounds} rounds, (min-max); Rubies on CPU {cfg.cpu})\n\n{t}\n")
    print(f"results: {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
