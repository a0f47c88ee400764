"""span_cost: what a unit of work costs the app (issue #19: "the gem's cost per request (start +
end) at most 1 µs and no allocation, with and without a sidecar attached").

programs/recursion.rb spans: SIZE times `Sdb.label(endpoint:, request_id:) { }` (one begin and one
end: what Sdb::Middleware and the Sidekiq middleware do per request), timed inside Ruby around the
loop, after a warm-up of 10,000 (Ruby's caches filled, the endpoint interned). Configurations,
interleaved round by round (order rotated), each a fresh Ruby pinned to the target core: no sdb
(an `Sdb.label` that only yields stands in: the app's own block call), the gem, and the gem with
sdb-sidecar attached at 1 kHz on the other core. Cost per unit = (wall time - the same round's
no-sdb time) / SIZE. Allocations: objects Ruby allocated during the loop (GC.stat), less the
same round's no-sdb count (the timing code's own)."""
from __future__ import annotations

import tempfile

import common
import cpu_micro
from common import fmt, summary

NAME = "span_cost"
CONFIGS = [("none", "none", 0), ("gem", "sdb", 0), ("sdb 1 kHz", "sdb", 1000)]
TARGET_NS = 1000    # a begin + end: at most 1 µs (median of interleaved rounds)


def run(cfg) -> str:
    common.pin_self()
    rounds = 1 if cfg.quick else cfg.rounds or 11
    size = 100_000 if cfg.quick else 2_000_000
    with tempfile.TemporaryDirectory(prefix="sdb-bench-") as tmp:
        raw = cpu_micro.interleave(cfg, CONFIGS, "spans", size, rounds, tmp)
    rows, table = [], []
    for name, _, _ in CONFIGS:
        rs = raw[name]
        for r, base in zip(rs, raw["none"]):
            r["ns_per_unit"] = (r["seconds"] - base["seconds"]) / size * 1e9
            r["allocated_over_none"] = r["allocated"] - base["allocated"]   # the timing code's own, taken out
        row = {"workload": "spans", "config": name, "seconds": summary([r["seconds"] for r in rs]),
               "ns_per_unit": summary([r["ns_per_unit"] for r in rs]),
               "allocated": summary([r["allocated_over_none"] for r in rs]), "rounds": rs}
        verdict = ""
        if name != "none" and not cfg.quick:
            ok = row["ns_per_unit"]["median"] <= TARGET_NS and row["allocated"]["max"] == 0
            verdict = f" (target <= {TARGET_NS} ns, no allocation: " + ("met)" if ok else "MISSED)")
        rows.append(row)
        table.append([name, fmt(row["seconds"], 3), "-" if name == "none" else fmt(row["ns_per_unit"], 0) + verdict,
                      fmt(row["allocated"], 0)])
    t = common.markdown_table(["configuration", "wall s", "ns per unit (begin + end) over none",
                               "objects allocated in the loop, over none"], table)
    common.write_result(cfg, NAME, {"rounds": rounds, "units": size}, rows, t)
    return (f"### span_cost: {size:,} x Sdb.label(endpoint:, request_id:) {{ }} (median of {rounds} rounds, "
            f"(min-max); {common.machine(cfg)['pinning']})\n\n{t}\n")
