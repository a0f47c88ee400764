#!/usr/bin/env python3
"""push_cost: what `--push` costs the sidecar, what a push weighs, and how late it reaches the backend.

Target: programs/stacks.rb in mixed mode, 12 threads (~5 ms busy, ~5 ms asleep, 30..50 frames deep),
on one core; `sdb-sidecar attach --rate 1000` on the other (taskset). Each round runs every
configuration once, in turn: `none` (no push), `pyroscope` (`--push pyroscope=URL`) and `otlp`
(`--push otlp=URL`), both `--push-interval INTERVAL`, to a receiver on loopback in this process that
only takes each request's bytes and arrival time (no answer delay, no decoding: the RawReceiver of
tests/support/push_receiver.py, whose PushReceiver decodes for the tests). Measured, per run:
  steady    on-CPU time of the sidecar's threads (/proc/PID/task/*/schedstat) over MEASURE s, from
            1 s after its eBPF symbolizer attached (start-up and compile excluded) to the SIGINT
            that ends it: the window holds MEASURE / INTERVAL cuts; % of one core;
  bytes     each request's body as sent (gzip; OTLP's plain protobuf before it was gzipped);
  latency   arrival at the receiver (wall clock) minus the interval's end (pprof time_nanos +
            duration_nanos; OTLP time_unix_nano + duration_nano), and minus its oldest sample
            (pprof time_nanos; OTLP the smallest sample timestamp).
Bytes and latencies are those of the requests that arrived within the steady window (not the
start-up's, nor the last one, cut short at the SIGINT).
Issue 40's targets: push costs at most +0.5 points of a core over `none` (medians, same run); a
sample reaches the backend at most INTERVAL + 2 s after it was taken.

    .venv/bin/python benchmarks/push_cost.py --ruby /usr/bin/ruby --gem-home build/gem-home [--rounds 3]
        [--measure 20] [--interval 5] [--kinds none,pyroscope,otlp] [--no-ebpf]
"""
from __future__ import annotations

import argparse
import gzip
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402
from common import fmt, summary  # noqa: E402

sys.path.insert(0, os.path.join(common.ROOT, "tests", "support"))
from push_receiver import RawReceiver  # noqa: E402

NAME = "push_cost"
THREADS, DEPTH, RATE = 12, 30, 1000.0
TARGET_POINTS = 0.5
SLACK_S = 2.0


def _fields(buf: bytes):
    """(field number, wire type, value) of a protobuf message's top-level fields (value: int or bytes)."""
    i, n = 0, len(buf)

    def varint():
        nonlocal i
        v = shift = 0
        while True:
            b = buf[i]
            i += 1
            v |= (b & 0x7F) << shift
            if b < 0x80:
                return v
            shift += 7
    while i < n:
        key = varint()
        field, wt = key >> 3, key & 7
        if wt == 0:
            yield field, wt, varint()
        elif wt == 1:
            yield field, wt, int.from_bytes(buf[i:i + 8], "little")
            i += 8
        elif wt == 2:
            ln = varint()
            yield field, wt, buf[i:i + ln]
            i += ln
        elif wt == 5:
            yield field, wt, int.from_bytes(buf[i:i + 4], "little")
            i += 4
        else:
            raise ValueError(f"wire type {wt}")


def _pprof_span(raw: bytes) -> tuple:
    """(time_nanos, duration_nanos) of a pprof (gzipped or not): fields 9 and 10 of Profile."""
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    t = d = 0
    for f, _, v in _fields(raw):
        if f == 9:
            t = v
        elif f == 10:
            d = v
    return t, d


def pyroscope_spans(body: bytes) -> list:
    """(oldest sample ns, interval end ns) of every pprof in a PushRequest (series 1, samples 2, raw_profile 1)."""
    out = []
    for f, _, series in _fields(gzip.decompress(body)):
        if f != 1:
            continue
        for g, _, sample in _fields(series):
            if g != 2:
                continue
            for h, _, raw in _fields(sample):
                if h == 1:
                    t, d = _pprof_span(raw)
                    out.append((t, t + d))
    return out


def otlp_spans(body: bytes) -> list:
    """(oldest sample ns, interval end ns) of every profile of an ExportProfilesServiceRequest, read by the
    opentelemetry-proto package's classes."""
    from opentelemetry.proto.collector.profiles.v1development.profiles_service_pb2 import (
        ExportProfilesServiceRequest)
    req = ExportProfilesServiceRequest()
    req.ParseFromString(gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body)
    out = []
    for rp in req.resource_profiles:
        for sp in rp.scope_profiles:
            for p in sp.profiles:
                stamps = [t for s in p.samples for t in s.timestamps_unix_nano]
                out.append((min(stamps) if stamps else p.time_unix_nano, p.time_unix_nano + p.duration_nano))
    return out


def one(cfg, kind: str, receiver: RawReceiver, tmp: str) -> dict:
    out = os.path.join(tmp, f"trace-{kind}.msgpack")
    extra = [] if kind == "none" else ["--push", f"{kind}={receiver.url}", "--push-interval", f"{cfg.interval:g}",
                                       "--service", "push-cost"]
    extra += ["--no-ebpf"] if cfg.no_ebpf else []
    receiver.take()
    with common.ruby_target(cfg, "stacks.rb", THREADS, DEPTH, "mixed") as target:
        # without eBPF: begun once the first samples are written (common.sidecar waits out its timeout for
        # an ebpf_attached record that never comes; 20 s: at load 20 on 2 cores it took over 10 s to start)
        with common.sidecar(target.pid, RATE, out, extra=extra, timeout=20.0 if cfg.no_ebpf else 300.0) as sc:
            time.sleep(1.0)
            a, ta, wa = common.proc_cpu_ns(sc.pid), time.monotonic(), time.time_ns()
            time.sleep(cfg.measure)
            b, tb, wb = common.proc_cpu_ns(sc.pid), time.monotonic(), time.time_ns()
            main_ns = b.get(sc.pid, 0) - a.get(sc.pid, 0)
            all_ns = common.cpu_ns_between(a, b)
        # the requests that arrived within the steady window (not those of the start-up, nor the last
        # one, cut short at the SIGINT)
        got = [g for g in receiver.take() if wa <= g[2] <= wb]
    os.unlink(out)
    win_ns = (tb - ta) * 1e9
    res = {"kind": kind, "steady_pct": 100.0 * all_ns / win_ns, "python_pct": 100.0 * main_ns / win_ns,
           "others_pct": 100.0 * (all_ns - main_ns) / win_ns, "rate_hz": sc.rate_hz,
           "late": sc.end.get("late", 0) + sc.end.get("missed", 0), "samples": sc.end.get("samples", 0),
           "push": sc.end.get("push"), "requests": len(got), "bytes": [len(body) for _, body, _ in got],
           "end_to_arrival_s": [], "oldest_to_arrival_s": []}
    for _, body, arrived in got:
        spans = pyroscope_spans(body) if kind == "pyroscope" else otlp_spans(body)
        if spans:
            res["oldest_to_arrival_s"].append((arrived - min(s[0] for s in spans)) / 1e9)
            res["end_to_arrival_s"].append((arrived - max(s[1] for s in spans)) / 1e9)
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ruby", default="/usr/bin/ruby")
    ap.add_argument("--gem-home", default="")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--measure", type=float, default=20.0, help="seconds of the steady window (default 20)")
    ap.add_argument("--interval", type=float, default=5.0, help="--push-interval (default 5)")
    ap.add_argument("--kinds", default="none,pyroscope,otlp")
    ap.add_argument("--no-ebpf", action="store_true", help="attach --no-ebpf: no compile at each start "
                    "(~40 s of CPU each on this VM), names read from outside")
    ap.add_argument("--results", default=common.RESULTS)
    cfg = ap.parse_args()
    cfg.gem_home = os.path.abspath(cfg.gem_home) if cfg.gem_home else ""
    cfg.quick = False
    kinds = cfg.kinds.split(",")
    common.pin_self()
    m = common.machine(cfg)
    load0 = os.getloadavg()
    raw = {k: [] for k in kinds}
    receiver = RawReceiver()
    try:
        with tempfile.TemporaryDirectory(prefix="sdb-bench-") as tmp:
            for i in range(cfg.rounds):
                order = kinds[i % len(kinds):] + kinds[:i % len(kinds)]   # the order turns round by round
                for kind in order:
                    r = one(cfg, kind, receiver, tmp)
                    raw[kind].append(r)
                    print(f"  round {i + 1}/{cfg.rounds} {kind}: steady {r['steady_pct']:.2f}% (python "
                          f"{r['python_pct']:.2f}%, others {r['others_pct']:.2f}%), {r['rate_hz']:.0f} Hz, "
                          f"{r['requests']} requests, bytes {r['bytes']}, end->arrival "
                          f"{[round(x, 3) for x in r['end_to_arrival_s']]}", file=sys.stderr, flush=True)
    finally:
        receiver.close()
    load1 = os.getloadavg()
    rows, table_rows = [], []
    for kind in kinds:
        rs = raw[kind]
        row = {"kind": kind, "rounds": rs}
        for k in ("steady_pct", "python_pct", "others_pct", "rate_hz"):
            row[k] = summary([r[k] for r in rs])
        # each round's own difference against the same round's `none`
        if "none" in kinds and kind != "none":
            row["delta_points"] = summary([r["steady_pct"] - n["steady_pct"] for r, n in zip(rs, raw["none"])])
        sizes = [b for r in rs for b in r["bytes"]]
        ends = [x for r in rs for x in r["end_to_arrival_s"]]
        olds = [x for r in rs for x in r["oldest_to_arrival_s"]]
        row["bytes"] = summary(sizes) if sizes else None
        row["end_to_arrival_s"] = summary(ends) if ends else None
        row["oldest_to_arrival_s"] = summary(olds) if olds else None
        rows.append(row)
        delta = ""
        if "delta_points" in row:
            ok = row["delta_points"]["median"] <= TARGET_POINTS
            delta = fmt(row["delta_points"]) + f" (target <= +{TARGET_POINTS}: {'met' if ok else 'MISSED'})"
        lat = "-"
        if row["oldest_to_arrival_s"]:
            ok = row["oldest_to_arrival_s"]["max"] <= cfg.interval + SLACK_S
            lat = fmt(row["oldest_to_arrival_s"]) + f" (max <= {cfg.interval + SLACK_S:g}: {'met' if ok else 'MISSED'})"
        table_rows.append([kind, fmt(row["steady_pct"]), delta or "-", fmt(row["python_pct"]), fmt(row["others_pct"]),
                           fmt(row["rate_hz"], 0), f"{sum(r['late'] for r in rs)}",
                           fmt(row["bytes"], 0) if row["bytes"] else "-",
                           fmt(row["end_to_arrival_s"], 3) if row["end_to_arrival_s"] else "-", lat])
    table = common.markdown_table(
        ["push", "steady CPU % of a core", "minus the round's none (points)", "python thread %",
         "other threads %", "achieved Hz", "late", "bytes a request", "interval end -> arrival s",
         "oldest sample -> arrival s"], table_rows)
    params = {"threads": THREADS, "depth": f"{DEPTH}..{DEPTH + 20}", "rate_hz": RATE, "measure_s": cfg.measure,
              "interval_s": cfg.interval, "rounds": cfg.rounds, "kinds": kinds,
              "no_ebpf": cfg.no_ebpf,
              "loadavg_before": load0, "loadavg_after": load1}
    common.write_result(cfg, NAME, params, rows, table)
    print(f"### push_cost ({THREADS} threads at {RATE:g} Hz, `--push-interval {cfg.interval:g}`, {cfg.measure:g} s "
          f"steady windows{', --no-ebpf' if cfg.no_ebpf else ''}, median of {cfg.rounds} rounds (min-max); {m['cpu']}, {m['cores']} cores, {m['ruby']}; "
          f"commit {common.git_commit()}; {m['pinning']}; load average {load0[0]:.2f} before, {load1[0]:.2f} after)"
          f"\n\n{table}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
