#!/usr/bin/env python3
"""push_replay: the push thread's CPU a sample, in-process, without a target or a sidecar (a load-independent
complement of push_cost.py, whose sidecar CPU a loaded machine blurs). Replays a recorded trace's records
through StreamTap/IntervalCutter and one protocol's encode, INTERVAL s of sample time at a time, as the
push thread does; prints each interval's samples, the whole cut's thread CPU a sample and the bytes a push
(SUMMARY: the median of intervals 1-4); --calls: the function calls of intervals 2.. under cProfile (a
count that does not depend on load); --profile: where the time goes; --dump FILE: the payloads (pickle).

    taskset -c 1 .venv/bin/python benchmarks/push_replay.py TRACE.msgpack pyroscope|otlp [--interval 5]
A trace: `sdb-sidecar attach --no-ebpf --rate 1000` of benchmarks/programs/stacks.rb 12 30 mixed, 26 s."""
import sys, time, argparse, collections, cProfile, pstats, io
import msgpack
from sdb_trace import TraceReader
from sdb_sidecar.push.cutter import StreamTap, IntervalCutter
from sdb_sidecar.push import pyroscope, otlp

ap = argparse.ArgumentParser()
ap.add_argument("trace"); ap.add_argument("kind"); ap.add_argument("--interval", type=float, default=5.0)
ap.add_argument("--calls", action="store_true"); ap.add_argument("--profile", action="store_true")
ap.add_argument("--dump", default=""); ap.add_argument("--sort", default="tottime")
a = ap.parse_args()
packer = msgpack.Packer(unicode_errors="replace")
with TraceReader(a.trace) as r:
    recs = [dict(r.header)] + [rec for rec in r.records()]
# chunks by the samples' time
chunks, cur, edge = [], [], None
for rec in recs:
    if rec.get("t") == "samples" and rec.get("dt_ns"):
        t = rec["base_ns"]
        if edge is None:
            edge = t + a.interval * 1e9
        elif t >= edge:
            chunks.append(cur); cur = []; edge += a.interval * 1e9
    cur.append(packer.pack(rec))
chunks.append(cur)
tap = StreamTap(); w = tap.for_writer(); cutter = IntervalCutter(tap)
enc = pyroscope.encode if a.kind == "pyroscope" else otlp.encode
out = []
def on(iv):
    t0 = time.thread_time()
    pays = enc(iv, "svc", False)
    out.append((iv.samples, time.thread_time() - t0, sum(len(p.body) for p in pays), pays))
prof = None
cut_cpu = []
for i, ch in enumerate(chunks):
    for d in ch: w(d)
    if (a.calls or a.profile) and i >= 2:
        prof = prof or cProfile.Profile()
        pr = cProfile.Profile(); pr.enable(); cutter.cut(on); pr.disable()
        st = pstats.Stats(pr); calls = st.total_calls
        print(f"interval {i}: {out[-1][0]} samples, {calls} calls, {calls/out[-1][0]:.1f} calls/sample")
        if a.profile and i == 3:
            s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats(a.sort).print_stats(25); print(s.getvalue())
    else:
        t0 = time.thread_time(); cutter.cut(on); cut_cpu.append(time.thread_time() - t0)
for i, (n, cpu, b, _) in enumerate(out):
    c = cut_cpu[i] if i < len(cut_cpu) else 0
    print(f"{i}: {n} samples encode {cpu*1e3:.1f} ms, whole cut {c*1e3:.1f} ms = {c/n*1e6 if n else 0:.2f} us/sample; {b} bytes")
if a.dump:
    import pickle; pickle.dump([[ (p.path, p.body, p.headers) for p in o[3]] for o in out], open(a.dump, "wb"))
import statistics
if cut_cpu:
    per = [cut_cpu[i] / out[i][0] * 1e6 for i in range(1, min(5, len(cut_cpu)))]
    print(f"SUMMARY {a.kind}: median {statistics.median(per):.2f} us/sample (min {min(per):.2f}) over intervals 1-4; bytes {[o[2] for o in out[1:5]]}")
