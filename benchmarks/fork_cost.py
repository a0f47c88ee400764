"""fork_cost: what the gem costs a process that forks short children (issue #18: Resque-style
fork-per-job servers, `fork { ...; exit! }`).

programs/recursion.rb fork: SIZE times `Process.wait(fork { exit!(0) })`, timed inside Ruby around the
loop. Configurations, interleaved round by round (order rotated), each a fresh Ruby pinned to the
target core: no profiler (sdb not loaded), the gem loaded (each child publishes its own registry,
the parent removes the registries of its children once they are gone), and the gem with
sdb-sidecar attached at 1 kHz on the other core. Ratio = wall time / the same round's no-profiler
time. After each gem round, the registries its children left in /dev/shm are counted (0 expected).

The same again with malloc's fastbins consolidated before each fork (recursion.rb fork_consolidated):
Ruby 3.1's fork child makes a large allocation that consolidates the fastbins it inherited, a
copy-on-write fault on every page they lie on, and how many pages that is depends on the heap's
layout (the gem's require changes it), not on the gem's work at fork: that table shows the gem's
own cost. The target is judged on the plain loop."""
from __future__ import annotations

import glob
import os
import re
import tempfile

import common
import cpu_micro
from common import fmt, summary

NAME = "fork_cost"
CONFIGS = [("none", "none", 0), ("gem", "sdb", 0), ("sdb 1 kHz", "sdb", 1000)]
TARGET = 1.05       # the gem, no sidecar: at most 5 % slower (median of interleaved rounds)


WORKLOADS = [("fork", "fork { exit!(0) } + wait"),
             ("fork_consolidated", "the same, fastbins consolidated before each fork")]


def run(cfg) -> str:
    common.pin_self()
    rounds = 1 if cfg.quick else cfg.rounds or 11
    size = 200 if cfg.quick else 2000       # ~0.2 s / ~2 s on the test machine

    def ours() -> set:
        return set(glob.glob("/dev/shm/sdb-*") + glob.glob("/dev/shm/.sdb-spare-*"))

    def left_by(path: str, pids: set) -> bool:
        """A registry (sdb-<pid>) or spare (.sdb-spare-<pid>-<n>) of one of this benchmark's
        processes (the workload's Ruby, its children) that is gone: left behind. Another program's
        (a test run beside this one, which may SIGKILL its Rubies) is not this benchmark's to count."""
        m = re.match(r"(?:sdb-|\.sdb-spare-)(\d+)", os.path.basename(path))
        return m is not None and int(m.group(1)) in pids and not os.path.exists(f"/proc/{m.group(1)}")

    before = ours()
    raws = {}
    with tempfile.TemporaryDirectory(prefix="sdb-bench-") as tmp:
        for workload, _ in WORKLOADS:
            raws[workload] = cpu_micro.interleave(cfg, CONFIGS, workload, size, rounds, tmp)
    pids = {pid for raw in raws.values() for rs in raw.values() for r in rs for pid in r.pop("pids", ())}
    left = sorted(p for p in ours() - before if left_by(p, pids))
    rows, tables = [], []
    for workload, title in WORKLOADS:
        table = []
        for name, _, _ in CONFIGS:
            rs = raws[workload][name]
            row = {"workload": workload, "config": name, "seconds": summary([r["seconds"] for r in rs]),
                   "us_per_fork": summary([r["seconds"] / size * 1e6 for r in rs]),
                   "ratio": summary([r["ratio"] for r in rs]), "rounds": rs}
            verdict = ""
            if name == "gem" and workload == "fork" and not cfg.quick:
                verdict = f" (target <= {TARGET:g}: " + ("met)" if row["ratio"]["median"] <= TARGET else "MISSED)")
            rows.append(row)
            table.append([name, fmt(row["us_per_fork"], 0), fmt(row["ratio"], 3) + verdict])
        tables.append((title, common.markdown_table(["configuration", "µs per fork + wait", "ratio to none"], table)))
    text = "\n\n".join(f"{title}:\n\n{t}" for title, t in tables)
    common.write_result(cfg, NAME, {"rounds": rounds, "forks": size}, rows, text,
                        extra={"registries_left": len(left)})
    return (f"### fork_cost: {size} x fork {{ exit!(0) }} + wait (median of {rounds} rounds, (min-max); "
            f"{common.machine(cfg)['pinning']}); registries and spares left in /dev/shm: {len(left)}\n\n{text}\n")
