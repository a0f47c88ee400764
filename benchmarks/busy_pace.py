"""busy_pace: the target is never stopped, so a busy counter in it keeps its pace.

Target: programs/counter.rb, one thread incrementing a counter in a tight loop of
method calls; asked on stdin, it answers its monotonic clock and count, read
together. One target process for the whole benchmark (pinned to one core, the
sidecar to the other), measured in windows of WINDOW s:
  none      no sidecar
  1 kHz     `sdb-sidecar attach --rate 1000` running (started 1 s before the window)
  10 kHz    the same at 10000 Hz (extra)
interleaved none, 1 kHz, none, 10 kHz, ... for ROUNDS rounds. Each sidecar window is
compared with the mean of the no-sidecar windows just before and after it
(ratio = iterations/s with / without): slow drift of the machine cancels out."""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time

import common
from common import fmt, summary

NAME = "busy_pace"


def read_count(target) -> tuple:
    target.stdin.write("\n")
    target.stdin.flush()
    t, n = target.stdout.readline().split()
    return int(t), int(n)


def window(target, seconds: float) -> float:
    """Iterations per second of the target over about `seconds`."""
    t0, n0 = read_count(target)
    time.sleep(seconds)
    t1, n1 = read_count(target)
    return (n1 - n0) / ((t1 - t0) / 1e9)


def with_sidecar(cfg, target, rate: float, seconds: float, tmp: str) -> tuple:
    out = os.path.join(tmp, "trace.msgpack")
    cmd = common.taskset(common.SAMPLER_CPU) + [
        os.path.join(common.BIN, "sdb-sidecar"), "attach", "--pid", str(target.pid), "--rate", str(rate),
        "--duration", str(seconds + 3.0), "-o", out, "--quiet"]
    sc = subprocess.Popen(cmd)
    try:
        time.sleep(1.0)     # Python start-up and attach: measure the steady state
        ips = window(target, seconds)
        if sc.poll() is not None:
            raise RuntimeError(f"sdb-sidecar exited early ({sc.returncode})")
    finally:
        sc.terminate()
        sc.wait()
    from sdb_trace import TraceReader
    last_ns = 0
    with TraceReader(out) as r:
        for rec in r.records():
            if rec["t"] == "samples" and rec["dt_ns"]:
                last_ns = max(last_ns, rec["base_ns"] + max(rec["dt_ns"]))
        end = r.end or {}
    # the sampler's rate: ticks over the time from the start to its last sample (the end record
    # comes after the eBPF probes are taken out, ~150 ms after the sampler stopped)
    return ips, end.get("ticks", 0) / max(1e-9, (last_ns - r.header["start_mono_ns"]) / 1e9)


def run(cfg) -> str:
    common.pin_self()
    rounds = 1 if cfg.quick else cfg.rounds or 6
    seconds = 2.0 if cfg.quick else 4.0
    rates = [1000.0, 10000.0]
    base, ratios, ips_with, achieved = [], {r: [] for r in rates}, {r: [] for r in rates}, {r: [] for r in rates}
    with tempfile.TemporaryDirectory(prefix="sdb-bench-") as tmp, \
            common.ruby_target(cfg, "counter.rb", stdin=True) as target:
        time.sleep(1.0)
        base.append(window(target, seconds))
        for i in range(rounds):
            for rate in rates:
                ips, hz = with_sidecar(cfg, target, rate, seconds, tmp)
                time.sleep(0.3)
                base.append(window(target, seconds))
                ratio = ips / statistics.mean(base[-2:])
                ratios[rate].append(ratio)
                ips_with[rate].append(ips)
                achieved[rate].append(hz)
                print(f"  busy_pace round {i + 1}/{rounds}: none {base[-2] / 1e6:.2f}M/s, {rate:g} Hz "
                      f"{ips / 1e6:.2f}M/s (achieved {hz:.0f} Hz), none {base[-1] / 1e6:.2f}M/s: ratio {ratio:.4f}",
                      file=sys.stderr, flush=True)
    rows = [{"config": "no sidecar", "ips": summary(base)}]
    table_rows = [["no sidecar", "-", fmt(summary(base), 2, 1e-6), "1 (reference)", "-"]]
    for rate in rates:
        row = {"config": f"sidecar {rate:g} Hz", "ips": summary(ips_with[rate]), "ratio": summary(ratios[rate]),
               "achieved_hz": summary(achieved[rate])}
        rows.append(row)
        slow = [100 * (1 - x) for x in ratios[rate]]
        table_rows.append([f"sidecar {rate:g} Hz", fmt(row["achieved_hz"], 0), fmt(row["ips"], 2, 1e-6),
                           fmt(row["ratio"], 4), fmt(summary(slow), 2)])
    table = common.markdown_table(
        ["config", "achieved Hz", "M iterations/s", "ratio with/without", "slowdown %"], table_rows)
    params = {"rounds": rounds, "window_s": seconds, "rates": rates, "order": "none, 1k, none, 10k, none, ..."}
    common.write_result(cfg, NAME, params, rows, table)
    return (f"### busy_pace (one busy Ruby thread, {seconds:g} s windows, {rounds} rounds interleaved, median "
            f"(min-max); {common.machine(cfg)['pinning']})\n\n{table}\n")
