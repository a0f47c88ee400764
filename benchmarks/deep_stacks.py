"""deep_stacks: `sdb-symbolize` on a trace of 10,000-deep recursion, every format: peak RSS (wait4's
rusage of the child), wall time and output size, against the size of `collapsed --no-lines`.
Issue #16's budget: at most 1 GB peak RSS per format; no format over 10x collapsed-without-lines.
Issue #44's: flamegraph and firefox at most 300 MB on 100,000 samples, on either shape (the
`budget` column; CPU seconds, the child's user+system time, move less with the machine's load
than wall seconds; --cpu pins the child as taskset does).

Two shapes of trace, written with sdb_trace.TraceWriter as the sidecar writes one; one thread
recursing down to 10,000 frames and back, sampled at 1 kHz, stacks `<main>`, then `Object#recurse`
at its call line for each level, then `Object#recurse` at its leaf line and a C function
(`Integer#times`) on top:
- `full` (issue #16's recording: 208,689 samples, 6,126 distinct stacks): recorded with
  --max-depth 20000, every frame kept; each level calls from the same line, so the stacks share
  their prefixes (the flame graph is a chain of 10,000 nodes with 6,126 leaves).
- `windows` (issue #44's: 2,769 distinct depths): recorded with the default --max-depth 2048, a
  stack deeper keeps its innermost 2,048 frames under a `(truncated)` root; each level calls from
  one of two lines (a seeded random choice per level, as a recursion whose branch depends on its
  data), so the windows of different depths share nothing below the root: as many tree nodes as
  frames in the distinct stacks.

    .venv/bin/python benchmarks/deep_stacks.py [--formats collapsed,json] [--samples N] [--shape windows] [--runs N] [--cpu N]
    .venv/bin/python benchmarks/deep_stacks.py --formats flamegraph,firefox --samples 100000 --runs 3 --cpu 1 --no-reference  # issue 44
Writes benchmarks/results/deep_stacks[-windows].json and prints a table (medians, min-max over the runs;
the formats run interleaved, run by run)."""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402

FORMATS = ["collapsed", "summary", "summary-by-line", "pprof", "speedscope", "flamegraph", "firefox", "json"]
MAX_DEPTH = 10_000
SHAPES = {   # shape -> (distinct depths, samples by default, frames the sampler keeps)
    "full": (6_126, 208_689, 20_000),
    "windows": (2_769, 101_501, 2_048),
}
BUDGET_BYTES = 1 << 30
TREE_BUDGET_BYTES = 300 * 10**6     # issue 44: flamegraph and firefox, 100,000 samples, either shape
TREE_FORMATS = ("flamegraph", "firefox")


def stacks_of(shape: str):
    """The distinct stacks (frame ids, leaf first, as the sidecar writes them) and, for each
    depth sampled, its stack's id. Frames: 0 `<main>`, 1 and 4 `recurse` at its two call lines,
    2 `recurse` at its leaf line, 3 `Integer#times`, 5 `(truncated)`."""
    distinct, _, keep = SHAPES[shape]
    depths = sorted({1 + (MAX_DEPTH - 1) * i // (distinct - 1) for i in range(distinct)})
    rnd = random.Random(44)
    call = [1 if shape == "full" or rnd.random() < 0.5 else 4 for _ in range(MAX_DEPTH)]   # level -> frame
    stacks, ids, sid_of_depth = [], {}, []
    for d in depths:
        st = [3, 2] + call[:d - 1][::-1] + [0]
        if len(st) > keep:
            st = st[:keep] + [5]
        key = tuple(st)
        if key not in ids:
            ids[key] = len(stacks)
            stacks.append(st)
        sid_of_depth.append(ids[key])
    return stacks, sid_of_depth


def make_trace(path: str, samples: int, shape: str = "full") -> int:
    """Writes the trace; returns its number of distinct stacks."""
    from sdb_trace import KIND_CFUNC, KIND_RUBY, KIND_TRUNCATED, TraceWriter
    start = 1_000_000_000
    stacks, sid_of_depth = stacks_of(shape)
    with open(path, "wb") as f:
        w = TraceWriter(f, {"pid": 4242, "ruby": "3.1.2", "ruby_description": "synthetic", "layout": "3.1",
                            "rate_hz": 1000, "start_mono_ns": start, "start_wall_ns": 0, "hostname": "bench",
                            "sdb_version": "bench", "command": ["ruby", "recursion.rb"],
                            "max_depth": SHAPES[shape][2]})
        w.thread(1, 4242, "", start, 3, start)
        w.iseq(0x1000, "<main>", "<main>", "recursion.rb", None, 1, 0, start)
        w.iseq(0x2000, "recurse", "recurse", "recursion.rb", None, 2, 1, start)
        w.method(0xa0, "recurse", 0, "Object", False, start)
        w.method(0xb0, "times", 1, "Integer", False, start)
        # frames: 0 <main> line 9, 1 recurse at a call (line 4), 2 recurse at its leaf (line 3), 3 Integer#times,
        # 4 recurse at its other call (line 6), 5 the sampler's truncation marker
        frames = ([KIND_RUBY, KIND_RUBY, KIND_RUBY, KIND_CFUNC, KIND_RUBY, KIND_TRUNCATED],
                  [0x1000, 0x2000, 0x2000, 0, 0x2000, 0], [1, 2, 3, 0, 5, 0], [0, 0xa0, 0xa0, 0xb0, 0xa0, 0],
                  [9, 4, 3, 0, 6, 0])
        w.frames(0, *[column[:4] if shape == "full" else column for column in frames])   # full: issue #16's trace
        for first in range(0, len(stacks), 256):
            w.stacks(first, stacks[first:first + 256])
        # down and up again, one sample a millisecond
        order = list(range(len(sid_of_depth))) + list(range(len(sid_of_depth) - 1, -1, -1))
        t, n = 0, 0
        while n < samples:
            k = min(1000, samples - n)
            sids = [sid_of_depth[order[(n + i) % len(order)]] for i in range(k)]
            w.samples(start + t, [i * 1_000_000 for i in range(k)], [1] * k, sids, [1] * k)
            t += k * 1_000_000
            n += k
        w.end(at_ns=start + t, reason="duration", ticks=samples, late=0, missed=0, samples=samples, torn=0,
              retried=0, reused=0, errors=0, threads=1, symbol_errors=0, ebpf=None)
    return len(stacks)


def run_one(trace: str, fmt: str, out: str, *extra: str, cpu: int = -1) -> dict:
    t0 = time.monotonic()
    pin = (lambda: os.sched_setaffinity(0, {cpu})) if cpu >= 0 else None
    p = subprocess.Popen([sys.executable, "-m", "sdb_symbolize.cli", trace, "--format", fmt, "-o", out,
                          "--no-progress", *extra], stderr=subprocess.PIPE, preexec_fn=pin)
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    err = p.stderr.read().decode(errors="replace")
    p.stderr.close()
    size = os.path.getsize(out) if os.path.exists(out) else 0
    if os.path.exists(out):
        os.unlink(out)
    return {"format": fmt + ("" if not extra else " " + " ".join(extra)), "exit": p.returncode,
            "peak_rss_bytes": usage.ru_maxrss * 1024, "seconds": round(time.monotonic() - t0, 2),
            "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2),
            "output_bytes": size, "stderr": err.strip()[-300:]}


def machine() -> dict:
    return {"cpu": common._cpu_model(), "cores": os.cpu_count(), "kernel": platform.release(),
            "python": platform.python_version(), "commit": common.git_commit(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load": os.getloadavg()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--shape", choices=sorted(SHAPES), default="full")
    ap.add_argument("--samples", type=int, default=0, help="default: the shape's recording's")
    ap.add_argument("--runs", type=int, default=1, help="runs of each format, interleaved (default 1)")
    ap.add_argument("--results", default="", help="default benchmarks/results/deep_stacks[-SHAPE].json")
    ap.add_argument("--no-reference", action="store_true", help="skip the collapsed --no-lines run (366+ MB out)")
    ap.add_argument("--cpu", type=int, default=-1, help="pin each sdb-symbolize to this CPU (as taskset -c)")
    args = ap.parse_args()
    samples = args.samples or SHAPES[args.shape][1]
    results = args.results or os.path.join(HERE, "results", "deep_stacks" +
                                           ("" if args.shape == "full" else f"-{args.shape}") + ".json")
    tmp = tempfile.mkdtemp(prefix="sdb-deep-")
    trace = os.path.join(tmp, "deep.msgpack")
    distinct = make_trace(trace, samples, args.shape)
    out = os.path.join(tmp, "out")
    ref_row = None if args.no_reference else run_one(trace, "collapsed", out, "--no-lines", cpu=args.cpu)
    ref = ref_row["output_bytes"] or 1 if ref_row else float("inf")
    formats = args.formats.split(",")
    runs = {fmt: [] for fmt in formats}
    for _ in range(args.runs):
        for fmt in formats:
            runs[fmt].append(run_one(trace, fmt, out, cpu=args.cpu))
    print(f"trace ({args.shape}): {os.path.getsize(trace):,} bytes, {samples:,} samples, {distinct:,} stacks up to "
          f"{MAX_DEPTH:,} frames deep, the sampler keeping {SHAPES[args.shape][2]:,}; {args.runs} run(s)")
    print(f"{'format':<22} {'exit':>4} {'peak RSS MiB':>18} {'seconds':>20} {'CPU seconds':>20} {'output MiB':>11} "
          f"{'x collapsed-no-lines':>21} {'budget':>6}")
    rows = []
    for name, rs in [("collapsed --no-lines", [ref_row])] * bool(ref_row) + [(fmt, runs[fmt]) for fmt in formats]:
        rss = common.summary([r["peak_rss_bytes"] / 2**20 for r in rs])
        secs = common.summary([r["seconds"] for r in rs])
        cpu = common.summary([r["cpu_seconds"] for r in rs])
        row = {"format": name, "exit": max(r["exit"] for r in rs), "peak_rss_mib": rss, "seconds": secs,
               "cpu_seconds": cpu,
               "output_bytes": rs[-1]["output_bytes"], "vs_collapsed_no_lines": round(rs[-1]["output_bytes"] / ref, 2),
               "stderr": [r["stderr"] for r in rs if r["stderr"]][:1], "runs": rs}
        budget = TREE_BUDGET_BYTES if name in TREE_FORMATS and samples <= 100_000 else BUDGET_BYTES
        row["within_budget"] = rss["max"] * 2**20 <= budget and row["vs_collapsed_no_lines"] <= 10
        rows.append(row)
        print(f"{name:<22} {row['exit']:>4} {common.fmt(rss, 0):>18} {common.fmt(secs, 1):>20} "
              f"{common.fmt(cpu, 1):>20} {row['output_bytes'] / 2**20:>11.1f} {row['vs_collapsed_no_lines']:>21.2f} "
              f"{'ok' if row['within_budget'] else 'OVER':>6}")
    os.makedirs(os.path.dirname(results), exist_ok=True)
    with open(results, "w") as f:
        json.dump({"benchmark": "deep_stacks", "shape": args.shape, "samples": samples, "distinct_stacks": distinct,
                   "max_depth": MAX_DEPTH, "sampler_max_depth": SHAPES[args.shape][2],
                   "trace_bytes": os.path.getsize(trace), "runs": args.runs, "machine": machine(), "rows": rows},
                  f, indent=1)
    os.unlink(trace)
    os.rmdir(tmp)
    return 0 if all(r["exit"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
