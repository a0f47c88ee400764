"""fork_cost: what the gem costs a process that forks short children (issue #18: Resque-style
fork-per-job servers, `fork { ...; exit! }`).

programs/recursion.rb fork: SIZE times `Process.wait(fork { exit!(0) })`, timed inside Ruby around the
loop. Configurations, interleaved round by round (order rotated), each a fresh Ruby pinned to the
target core: no profiler (sdb not loaded), the gem loaded (each child publishes its own registry,
the parent removes the registries of its children once they are gone), and the gem with
sdb-sidecar attached at 1 kHz on the other core. Ratio = wall time / the same round's no-profiler
time. After each gem round, the registries its children left in /dev/shm are counted (0 expected)."""
from __future__ import annotations

import glob
import tempfile

import common
import cpu_micro
from common import fmt, summary

NAME = "fork_cost"
CONFIGS = [("none", "none", 0), ("gem", "sdb", 0), ("sdb 1 kHz", "sdb", 1000)]
TARGET = 1.05       # the gem, no sidecar: at most 5 % slower (median of interleaved rounds)


def run(cfg) -> str:
    common.pin_self()
    rounds = 1 if cfg.quick else cfg.rounds or 11
    size = 200 if cfg.quick else 2000       # ~0.2 s / ~2 s on the test machine
    before = set(glob.glob("/dev/shm/sdb-*"))
    with tempfile.TemporaryDirectory(prefix="sdb-bench-") as tmp:
        raw = cpu_micro.interleave(cfg, CONFIGS, "fork", size, rounds, tmp)
    left = sorted(set(glob.glob("/dev/shm/sdb-*")) - before)
    rows, table = [], []
    for name, _, _ in CONFIGS:
        rs = raw[name]
        row = {"workload": "fork", "config": name, "seconds": summary([r["seconds"] for r in rs]),
               "us_per_fork": summary([r["seconds"] / size * 1e6 for r in rs]),
               "ratio": summary([r["ratio"] for r in rs]), "rounds": rs}
        verdict = ""
        if name == "gem" and not cfg.quick:
            verdict = f" (target <= {TARGET:g}: " + ("met)" if row["ratio"]["median"] <= TARGET else "MISSED)")
        rows.append(row)
        table.append([name, fmt(row["us_per_fork"], 0), fmt(row["ratio"], 3) + verdict])
    t = common.markdown_table(["configuration", "µs per fork + wait", "ratio to none"], table)
    common.write_result(cfg, NAME, {"rounds": rounds, "forks": size}, rows, t,
                        extra={"registries_left": len(left)})
    return (f"### fork_cost: {size} x fork {{ exit!(0) }} + wait (median of {rounds} rounds, (min-max); "
            f"{common.machine(cfg)['pinning']}); registries left in /dev/shm: {len(left)}\n\n{t}\n")
