"""Compare two builds of sdb (two git worktrees, each with its own .venv and `make setup` done) on the
same benchmarks, round by round interleaved, so that both see the same machine: round k runs the
benchmark once in each tree (before then after on even rounds, after then before on odd ones), each
with that tree's own .venv/bin/python benchmarks/run.py --only NAME --rounds 1. Prints, for every
row and metric, the median of the rounds with (min-max) for both trees and after/before.

  .venv/bin/python benchmarks/compare_builds.py --before ../wt-before \\
      --only sample_cost --only sidecar_cpu --rounds 5 --tree-gem-home build/gem-home -- --ruby /usr/bin/ruby
  .venv/bin/python benchmarks/compare_builds.py --before ../wt-before --only symbolize_formats --rounds 3 -- --quick

Arguments after `--` go to run.py unchanged. --bench-root DIR: run DIR's benchmark code (run.py and the rest)
in both trees, each measuring its own build (SDB_BENCH_ROOT: common.ROOT), when the trees' benchmarks differ. --tree-gem-home DIR: pass each tree's own DIR (relative to the
tree) as --gem-home. The JSON of every run stays in --out (default benchmarks/results/compare/): one
directory per tree and round; the summary goes to --out/summary.json and, as Markdown, to stdout.
Run it on an otherwise idle machine (the benchmarks load the CPU); `git worktree add ../wt-before REV` and
`make setup` there make the tree to compare against.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# the metrics each benchmark's JSON rows hold that are worth comparing (each a summary dict: median ...)
METRICS = {
    "sample_cost": ["paced_us", "tight_us"],
    "sidecar_cpu": ["steady_pct", "sampler_pct", "total_pct"],
    "symbolize_formats": ["wall_s"],
}
LABEL_KEYS = ["mode", "depth", "rate_asked_hz", "format"]


def run_once(tree: str, name: str, out: str, gem_home: str, extra: list, bench_root: str) -> None:
    cmd = [os.path.join(tree, ".venv", "bin", "python"), os.path.join(bench_root or tree, "benchmarks", "run.py"),
           "--only", name, "--rounds", "1", "--results", out] + extra
    if gem_home:
        cmd += ["--gem-home", os.path.join(tree, gem_home)]
    print(f"  $ {' '.join(cmd)}", file=sys.stderr, flush=True)
    r = subprocess.run(cmd, cwd=tree, stdout=subprocess.DEVNULL, env={**os.environ, "SDB_BENCH_ROOT": tree})
    if r.returncode != 0:
        raise SystemExit(f"compare_builds: {name} failed in {tree} (exit {r.returncode}); its output is above")


def rows_of(name: str, doc: dict):
    """(label, metric, value) for every row of a benchmark's JSON (one round: the value is the median)."""
    rows = doc["rows"]
    if name == "symbolize_formats":         # rows[0]: {format: {metric: summary}}
        rows = [{"format": f, **m} for f, m in rows[0].items()]
    for row in rows:
        label = ", ".join(f"{k}={row[k]}" for k in LABEL_KEYS if k in row)
        for metric in METRICS.get(name, []):
            if isinstance(row.get(metric), dict):
                yield label, metric, row[metric]["median"]


def summary(values: list) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values),
            "values": values}


def fmt(s: dict) -> str:
    d = 3 if abs(s["median"]) < 10 else 1
    return f"{s['median']:.{d}f} ({s['min']:.{d}f}-{s['max']:.{d}f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="the worktree to compare against")
    ap.add_argument("--after", default=os.path.dirname(HERE), help="the worktree measured (default: this one)")
    ap.add_argument("--only", action="append", required=True, choices=sorted(METRICS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tree-gem-home", default="", help="each tree's GEM_HOME, relative to the tree (build/gem-home)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "compare"))
    ap.add_argument("--bench-root", default="", help="the tree whose benchmark code runs in both (default: each its own)")
    ap.add_argument("extra", nargs="*", help="after --: arguments for run.py")
    cfg = ap.parse_args()
    trees = {"before": os.path.abspath(cfg.before), "after": os.path.abspath(cfg.after)}
    commits = {k: subprocess.run(["git", "-C", t, "rev-parse", "--short", "HEAD"], capture_output=True,
                                 text=True).stdout.strip() for k, t in trees.items()}
    values = {}                     # (name, label, metric) -> {"before": [...], "after": [...]}
    t0 = time.monotonic()
    for k in range(cfg.rounds):
        order = ["before", "after"] if k % 2 == 0 else ["after", "before"]
        for name in cfg.only:
            for which in order:
                out = os.path.join(cfg.out, which, f"round{k}")
                print(f"compare_builds: round {k + 1}/{cfg.rounds} {name} {which}", file=sys.stderr, flush=True)
                run_once(trees[which], name, out, cfg.tree_gem_home, cfg.extra, os.path.abspath(cfg.bench_root)
                         if cfg.bench_root else "")
                path = os.path.join(out, f"{name}{'-quick' if '--quick' in cfg.extra else ''}.json")
                with open(path) as f:
                    for label, metric, v in rows_of(name, json.load(f)):
                        values.setdefault((name, label, metric), {"before": [], "after": []})[which].append(v)
    lines = [f"before {commits['before']} ({trees['before']}), after {commits['after']} ({trees['after']}); "
             f"{cfg.rounds} interleaved rounds, run.py {' '.join(cfg.extra)}"
             f"{'; benchmark code of ' + cfg.bench_root if cfg.bench_root else ''}; {time.monotonic() - t0:.0f} s", "",
             "| benchmark | row | metric | before: median (min-max) | after: median (min-max) | after / before |",
             "|---|---|---|---|---|---|"]
    doc = {"commits": commits, "trees": trees, "rounds": cfg.rounds, "extra": cfg.extra, "rows": []}
    for (name, label, metric), v in values.items():
        b, a = summary(v["before"]), summary(v["after"])
        ratio = a["median"] / b["median"] if b["median"] else float("nan")
        lines.append(f"| {name} | {label} | {metric} | {fmt(b)} | {fmt(a)} | {ratio:.3f} |")
        doc["rows"].append({"benchmark": name, "row": label, "metric": metric, "before": b, "after": a,
                            "ratio": ratio})
    os.makedirs(cfg.out, exist_ok=True)
    with open(os.path.join(cfg.out, "summary.json"), "w") as f:
        json.dump(doc, f, indent=1)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
