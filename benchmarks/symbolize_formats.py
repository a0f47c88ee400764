"""symbolize_formats: `sdb-symbolize` on a synthetic trace of N samples of 50-frame stacks, every
format: wall time, samples per second and peak RSS (each run is a child process; its peak comes
from wait4's rusage). Also: memory stays flat with the trace's length (collapsed and summary
on N and 10 N samples).

The trace is written with sdb_trace.TraceWriter, as the sidecar writes one: 8 threads at 1 kHz,
batches of 100 ticks, 2,000 distinct stacks of 50 frames (45 Ruby, 5 C functions) over 400
ISeqs in 40 files, threads running (70 %), waiting for the GVL (10 %) or blocked (20 %).
Target (issue #4): collapsed at least 500,000 samples per second on 1 million samples.
The same trace written twice, plain (format 2's records) and compressed (format 3: zstd after the
header, as the sidecar writes), each format run on both in every round: the compressed trace must
read at least as fast (issue #18)."""
from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile
import time

import common

NAME = "symbolize_formats"
TARGET_PER_S = 500_000
FORMATS = ["collapsed", "summary", "summary-by-line", "pprof", "speedscope", "flamegraph", "firefox", "json", "otlp"]

THREADS = 8
DEPTH = 50
DISTINCT_STACKS = 2000
ISEQS = 400
CFUNCS = 20
TICKS_PER_BATCH = 100
RATE_HZ = 1000


def make_trace(path: str, samples: int, seed: int = 1, compress: bool = True) -> None:
    """A synthetic trace of `samples` samples (rounded up to whole ticks of THREADS threads)."""
    from sdb_trace import KIND_CFUNC, KIND_RUBY, TraceWriter
    rnd = random.Random(seed)
    start = 1_000_000_000
    with open(path, "wb") as f:
        w = TraceWriter(f, {"pid": 4242, "ruby": "3.1.2", "ruby_description": "synthetic", "layout": "3.1",
                            "rate_hz": RATE_HZ, "start_mono_ns": start, "start_wall_ns": 1_700_000_000_000_000_000,
                            "hostname": "bench", "sdb_version": "0.1.0", "command": ["ruby", "synthetic.rb"],
                            "max_depth": 2048}, compress=compress)
        for t in range(THREADS):
            w.thread(t + 1, 5000 + t, "main" if t == 0 else f"worker-{t}", start, 1 if t == 0 else 0, start)
        for i in range(ISEQS):
            w.iseq(0x10000 + i * 0x100, f"Mod{i % 7}::Klass{i % 13}#method_{i}", f"method_{i}",
                   f"/app/lib/file_{i % 40}.rb", None, 10 + i, 1, start)
        for i in range(CFUNCS):
            w.cfunc(0x900000 + i * 0x40, f"Kernel#cfunc_{i}", start)
        # frames: each ISeq at 4 different lines, plus the C functions
        kind, iseq, pc, me, line = [], [], [], [], []
        for i in range(ISEQS):
            for j in range(4):
                kind.append(KIND_RUBY)
                iseq.append(0x10000 + i * 0x100)
                pc.append(0x500000 + i * 0x100 + j * 8)
                me.append(0)
                line.append(10 + i + j)
        for i in range(CFUNCS):
            kind.append(KIND_CFUNC)
            iseq.append(0)
            pc.append(0)
            me.append(0x900000 + i * 0x40)
            line.append(0)
        w.frames(0, kind, iseq, pc, me, line)
        ruby_frames = ISEQS * 4
        # stacks share roots as real ones do: a few trunks, then random branches
        trunks = [[rnd.randrange(ruby_frames) for _ in range(20)] for _ in range(10)]
        stacks = []
        for s in range(DISTINCT_STACKS):
            outer = trunks[s % len(trunks)] + [rnd.randrange(ruby_frames) for _ in range(DEPTH - 20 - 5)]
            inner = [ruby_frames + rnd.randrange(CFUNCS) if k % 2 == 0 else rnd.randrange(ruby_frames)
                     for k in range(5)]
            stacks.append(inner + list(reversed(outer)))  # innermost first
        w.stacks(0, stacks)
        per_thread = [[rnd.randrange(DISTINCT_STACKS) for _ in range(500)] for _ in range(THREADS)]
        ticks = -(-samples // THREADS)
        tick = 0
        states_pool = [1] * 7 + [2] + [3] * 2
        while tick < ticks:
            n = min(TICKS_PER_BATCH, ticks - tick)
            base = start + tick * 1_000_000
            dts, ths, sids, sts = [], [], [], []
            for k in range(n):
                for t in range(THREADS):
                    dts.append(k * 1_000_000 + t * 1000)
                    ths.append(t + 1)
                    sids.append(per_thread[t][(tick + k) // 7 % 500])
                    sts.append(states_pool[(tick + k + t) % 10])
            w.samples(base, dts, ths, sids, sts)
            tick += n
        w.end(at_ns=start + ticks * 1_000_000, reason="duration", ticks=ticks, late=0, missed=0,
              samples=ticks * THREADS, torn=0, retried=0, errors=0, threads=THREADS, symbol_errors=0)


def symbolize(trace: str, fmt: str, out: str) -> dict:
    """One child `sdb-symbolize` run: wall seconds and peak RSS (MiB)."""
    cmd = [sys.executable, "-m", "sdb_symbolize.cli", trace, "--format", fmt, "-o", out, "--idle", "--no-progress"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(common.ROOT, "symbolizer"),
                                                       os.environ.get("PYTHONPATH", "")]))
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.monotonic() - t0
    err = p.stderr.read().decode(errors="replace")
    p.stderr.close()
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise RuntimeError(f"sdb-symbolize --format {fmt} failed ({p.returncode}): {err.strip()}")
    return {"wall_s": wall, "peak_rss_mib": usage.ru_maxrss / 1024.0, "output_mib": os.path.getsize(out) / 2**20}


def run(cfg) -> str:
    quick = cfg.quick
    n = 200_000 if quick else 1_000_000
    rounds = cfg.rounds or (1 if quick else 3)
    tmp = tempfile.mkdtemp(prefix="sdb-bench-symbolize-")
    results = {"samples": n, "rounds": rounds, "formats": {}, "flat_memory": {}}
    try:
        trace = os.path.join(tmp, "trace.msgpack")
        plain = os.path.join(tmp, "plain.msgpack")
        t0 = time.monotonic()
        make_trace(trace, n)
        make_trace(plain, n, compress=False)
        print(f"  traces of {n:,} samples written in {time.monotonic() - t0:.1f} s "
              f"({os.path.getsize(trace) / 2**20:.1f} MiB compressed, {os.path.getsize(plain) / 2**20:.1f} MiB "
              f"plain)", file=sys.stderr, flush=True)
        runs = {f: [] for f in FORMATS}
        plain_runs = {f: [] for f in FORMATS}
        for k in range(rounds):                      # interleaved: every format on both, once per round
            for fmt in FORMATS:
                pair = [(runs, trace), (plain_runs, plain)]
                for into, path in (pair if k % 2 == 0 else pair[::-1]):
                    into[fmt].append(symbolize(path, fmt, os.path.join(tmp, f"out.{fmt}")))
        rows = ["| format | time s (median, min-max) | samples/s | peak RSS MiB | output MiB | plain records: time s | "
                "compressed / plain |", "|---|---|---|---|---|---|---|"]
        for fmt in FORMATS:
            wall = common.summary([r["wall_s"] for r in runs[fmt]])
            pwall = common.summary([r["wall_s"] for r in plain_runs[fmt]])
            ratio = common.summary([a["wall_s"] / b["wall_s"] for a, b in zip(runs[fmt], plain_runs[fmt])])
            rss = common.summary([r["peak_rss_mib"] for r in runs[fmt]])
            rate = n / wall["median"]
            results["formats"][fmt] = {"wall_s": wall, "peak_rss_mib": rss, "samples_per_s": rate,
                                       "output_mib": runs[fmt][0]["output_mib"], "plain_wall_s": pwall,
                                       "compressed_over_plain": ratio}
            rows.append(f"| {fmt} | {common.fmt(wall, 2)} | {rate:,.0f} | {common.fmt(rss, 0)} | "
                        f"{runs[fmt][0]['output_mib']:.1f} | {common.fmt(pwall, 2)} | {common.fmt(ratio, 3)} |")
        # memory stays flat: the same formats on a trace ten times longer
        big_n = n * 10
        big = os.path.join(tmp, "big.msgpack")
        t0 = time.monotonic()
        make_trace(big, big_n)
        print(f"  trace of {big_n:,} samples written in {time.monotonic() - t0:.1f} s", file=sys.stderr, flush=True)
        flat = ["", f"Memory against length: peak RSS on {n:,} and {big_n:,} samples (one run each).", "",
                f"| format | {n:,}: MiB | {big_n:,}: MiB | {big_n:,}: s |", "|---|---|---|---|"]
        # every format but json (2.6 GiB of output per million samples; it writes each sample as it reads it)
        # and otlp (one protobuf message, built whole in memory: it grows with the samples, by design)
        for fmt in [f for f in FORMATS if f not in ("json", "otlp")]:
            small = runs[fmt][0]
            r = symbolize(big, fmt, os.path.join(tmp, f"big.{fmt}"))
            results["flat_memory"][fmt] = {"samples": big_n, "peak_rss_mib": r["peak_rss_mib"], "wall_s": r["wall_s"],
                                           "small_peak_rss_mib": small["peak_rss_mib"]}
            flat.append(f"| {fmt} | {small['peak_rss_mib']:.0f} | {r['peak_rss_mib']:.0f} | {r['wall_s']:.1f} "
                        f"({big_n / r['wall_s']:,.0f} samples/s) |")
            os.unlink(os.path.join(tmp, f"big.{fmt}"))
    finally:
        for name in os.listdir(tmp):
            os.unlink(os.path.join(tmp, name))
        os.rmdir(tmp)
    collapsed = results["formats"]["collapsed"]["samples_per_s"]
    head = (f"### symbolize_formats: {n:,} samples of {DEPTH} frames, {THREADS} threads, {rounds} round(s)\n\n"
            f"collapsed: {collapsed:,.0f} samples/s (target >= {TARGET_PER_S:,}: "
            f"{'met' if collapsed >= TARGET_PER_S else 'NOT met'})\n")
    table = "\n".join([head] + rows + flat) + "\n"
    params = {"samples": n, "depth": DEPTH, "threads": THREADS, "distinct_stacks": DISTINCT_STACKS, "rounds": rounds}
    common.write_result(cfg, NAME, params, [results["formats"], results["flat_memory"]], table)
    return table
