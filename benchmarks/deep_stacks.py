"""deep_stacks: `sdb-symbolize` on a trace of 10,000-deep recursion, every format: peak RSS (wait4's
rusage of the child), wall time and output size, against the size of `collapsed --no-lines`.
Issue #16's budget: at most 1 GB peak RSS per format; no format over 10x collapsed-without-lines.

The trace is written with sdb_trace.TraceWriter as the sidecar writes one, shaped like issue #16's
recording (208,689 samples, 6,126 distinct stacks): one thread recursing down to 10,000 frames and
back, sampled at 1 kHz; stacks are `<main>`, then `Object#recurse` at its call line d-1 times, then
`Object#recurse` at its leaf line and a C function (`Integer#times`) on top.

    .venv/bin/python benchmarks/deep_stacks.py [--formats collapsed,json] [--samples N]
Writes benchmarks/results/deep_stacks.json and prints a table."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
FORMATS = ["collapsed", "summary", "summary-by-line", "pprof", "speedscope", "flamegraph", "firefox", "json"]
MAX_DEPTH = 10_000
DISTINCT = 6_126
SAMPLES = 208_689
BUDGET_BYTES = 1 << 30


def make_trace(path: str, samples: int = SAMPLES) -> None:
    from sdb_trace import KIND_CFUNC, KIND_RUBY, TraceWriter
    start = 1_000_000_000
    # the distinct depths: spread over 1..10,000, the deepest included
    depths = sorted({1 + (MAX_DEPTH - 1) * i // (DISTINCT - 1) for i in range(DISTINCT)})
    with open(path, "wb") as f:
        w = TraceWriter(f, {"pid": 4242, "ruby": "3.1.2", "ruby_description": "synthetic", "layout": "3.1",
                            "rate_hz": 1000, "start_mono_ns": start, "start_wall_ns": 0, "hostname": "bench",
                            "sdb_version": "bench", "command": ["ruby", "recursion.rb"], "max_depth": 20_000})
        w.thread(1, 4242, "", start, 3, start)
        w.iseq(0x1000, "<main>", "<main>", "recursion.rb", None, 1, 0, start)
        w.iseq(0x2000, "recurse", "recurse", "recursion.rb", None, 2, 1, start)
        w.method(0xa0, "recurse", 0, "Object", False, start)
        w.method(0xb0, "times", 1, "Integer", False, start)
        # frames: 0 <main> line 9, 1 recurse at its call (line 4), 2 recurse at its leaf (line 3), 3 Integer#times
        w.frames(0, [KIND_RUBY, KIND_RUBY, KIND_RUBY, KIND_CFUNC], [0x1000, 0x2000, 0x2000, 0], [1, 2, 3, 0],
                 [0, 0xa0, 0xa0, 0xb0], [9, 4, 3, 0])
        for first in range(0, len(depths), 256):
            w.stacks(first, [[3, 2] + [1] * (d - 1) + [0] for d in depths[first:first + 256]])
        # down and up again, one sample a millisecond
        order = list(range(len(depths))) + list(range(len(depths) - 1, -1, -1))
        t, n = 0, 0
        while n < samples:
            k = min(1000, samples - n)
            sids = [order[(n + i) % len(order)] for i in range(k)]
            w.samples(start + t, [i * 1_000_000 for i in range(k)], [1] * k, sids, [1] * k)
            t += k * 1_000_000
            n += k
        w.end(at_ns=start + t, reason="duration", ticks=samples, late=0, missed=0, samples=samples, torn=0,
              retried=0, reused=0, errors=0, threads=1, symbol_errors=0, ebpf=None)


def run_one(trace: str, fmt: str, out: str, *extra: str) -> dict:
    t0 = time.monotonic()
    p = subprocess.Popen([sys.executable, "-m", "sdb_symbolize.cli", trace, "--format", fmt, "-o", out,
                          "--no-progress", *extra], stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    err = p.stderr.read().decode(errors="replace")
    p.stderr.close()
    size = os.path.getsize(out) if os.path.exists(out) else 0
    if os.path.exists(out):
        os.unlink(out)
    return {"format": fmt + ("" if not extra else " " + " ".join(extra)), "exit": p.returncode,
            "peak_rss_bytes": usage.ru_maxrss * 1024, "seconds": round(time.monotonic() - t0, 2),
            "output_bytes": size, "stderr": err.strip()[-300:]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--samples", type=int, default=SAMPLES)
    ap.add_argument("--results", default=os.path.join(HERE, "results", "deep_stacks.json"))
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="sdb-deep-")
    trace = os.path.join(tmp, "deep.msgpack")
    make_trace(trace, args.samples)
    out = os.path.join(tmp, "out")
    rows = [run_one(trace, "collapsed", out, "--no-lines")]
    ref = rows[0]["output_bytes"] or 1
    for fmt in args.formats.split(","):
        rows.append(run_one(trace, fmt, out))
    print(f"trace: {os.path.getsize(trace):,} bytes, {args.samples:,} samples, {DISTINCT:,} stacks up to "
          f"{MAX_DEPTH:,} frames deep")
    print(f"{'format':<22} {'exit':>4} {'peak RSS MiB':>12} {'seconds':>8} {'output MiB':>11} {'x collapsed-no-lines':>21}")
    for r in rows:
        r["vs_collapsed_no_lines"] = round(r["output_bytes"] / ref, 2)
        r["within_budget"] = r["peak_rss_bytes"] <= BUDGET_BYTES and r["vs_collapsed_no_lines"] <= 10
        print(f"{r['format']:<22} {r['exit']:>4} {r['peak_rss_bytes'] / 2**20:>12.0f} {r['seconds']:>8.1f} "
              f"{r['output_bytes'] / 2**20:>11.1f} {r['vs_collapsed_no_lines']:>21.2f}")
    os.makedirs(os.path.dirname(args.results), exist_ok=True)
    with open(args.results, "w") as f:
        json.dump({"benchmark": "deep_stacks", "samples": args.samples, "distinct_stacks": DISTINCT,
                   "max_depth": MAX_DEPTH, "trace_bytes": os.path.getsize(trace), "rows": rows}, f, indent=1)
    os.unlink(trace)
    os.rmdir(tmp)
    return 0 if all(r["exit"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
