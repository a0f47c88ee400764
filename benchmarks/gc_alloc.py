"""gc_alloc: what the gem and the sidecar cost an allocation-heavy Ruby thread (issue #17, GC on 3.1).

programs/recursion.rb alloc: SIZE arrays of 20 strings, kept in a ring of 20,000, so that minor GCs
run all the time. Before Ruby 3.3 any GC event hook sends every allocation down Ruby's slow path;
the gem hooks no GC there, and the sidecar reads the VM's GC flag from outside instead (the
`(garbage collection)` frame). Configurations, interleaved round by round (order rotated), each a
fresh Ruby pinned to the target core, the sidecar pinned to the other: no profiler (sdb not loaded),
the gem loaded, sdb-sidecar attached at 1 kHz. Ratio = wall time / the same round's no-profiler time.
The sdb run's trace gives the share of the workload's samples in GC."""
from __future__ import annotations

import tempfile

import common
import cpu_micro
from common import fmt, summary

NAME = "gc_alloc"
CONFIGS = [("none", "none", 0), ("gem", "sdb", 0), ("sdb 1 kHz", "sdb", 1000)]


def run(cfg) -> str:
    common.pin_self()
    rounds = 1 if cfg.quick else cfg.rounds or 11
    size = 200_000 if cfg.quick else 2_000_000  # ~0.2 s / ~2 s on the test machine
    with tempfile.TemporaryDirectory(prefix="sdb-bench-") as tmp:
        raw = cpu_micro.interleave(cfg, CONFIGS, "alloc", size, rounds, tmp)
    rows, table = [], []
    for name, _, _ in CONFIGS:
        rs = raw[name]
        row = {"workload": "alloc", "config": name, "seconds": summary([r["seconds"] for r in rs]),
               "ratio": summary([r["ratio"] for r in rs]), "cpu_share": summary([r["cpu_share"] for r in rs]),
               "rounds": rs}
        rows.append(row)
        table.append([name, fmt(row["seconds"], 3), fmt(row["ratio"], 3), f"{100 * row['cpu_share']['min']:.1f}"])
    t = common.markdown_table(["configuration", "wall s", "ratio to none", "target's CPU / wall %, worst round"], table)
    common.write_result(cfg, NAME, {"rounds": rounds, "arrays": size}, rows, t)
    return (f"### gc_alloc: {size} arrays of 20 strings, a ring of 20,000 (median of {rounds} rounds, (min-max); "
            f"{common.machine(cfg)['pinning']})\n\n{t}\n")
