"""first_sample: how long after the start a recording has its first sample, and its eBPF names.

record: `sdb-sidecar record -- ruby first_line.rb`; the time from the program's first line (the gem's
registry exists by then) to the trace's first sample, and to its `ebpf_attached` record.
attach: a Ruby already running with the gem; the time from launching `sdb-sidecar attach` (a fresh
Python process, imports included) to the first sample, and to eBPF attached.
Each with eBPF on and with --no-ebpf, interleaved, ROUNDS rounds; target and sidecar on different cores."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

import common

NAME = "first_sample"
SIDECAR = [sys.executable, "-m", "sdb_sidecar.cli"]


def trace_times(path: str):
    """(first sample's time, eBPF attached time or None) of a trace, CLOCK_MONOTONIC ns."""
    from sdb_trace import TraceReader
    first = attached = None
    with TraceReader(path) as r:
        for rec in r.records():
            if rec["t"] == "samples" and rec["dt_ns"] and first is None:
                first = rec["base_ns"] + min(rec["dt_ns"])
            elif rec["t"] == "ebpf_attached":
                attached = rec["at_ns"]
    return first, attached


def one_record(cfg, ebpf: bool, out: str):
    env = common.gem_env(cfg)
    cmd = common.taskset(common.SAMPLER_CPU) + SIDECAR + ["record", "-q", "-o", out] + \
        ([] if ebpf else ["--no-ebpf"]) + ["--"] + common.taskset(common.TARGET_CPU) + \
        [cfg.ruby, os.path.join(common.PROGRAMS, "first_line.rb"), "2.5"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    if p.returncode != 0 or not p.stdout.startswith("first_line "):
        raise RuntimeError(f"record failed (exit {p.returncode}): {p.stderr.strip()[-300:]}")
    t0 = int(p.stdout.split()[1])
    first, attached = trace_times(out)
    return t0, first, attached


def one_attach(cfg, ebpf: bool, out: str):
    with common.ruby_target(cfg, "first_line.rb", "wait", stdin=True) as target:
        cmd = common.taskset(common.SAMPLER_CPU) + SIDECAR + ["attach", "--pid", str(target.pid), "-q", "-d", "2.5",
                                                              "-o", out] + ([] if ebpf else ["--no-ebpf"])
        t0 = time.monotonic_ns()
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            raise RuntimeError(f"attach failed (exit {p.returncode}): {p.stderr.strip()[-300:]}")
    first, attached = trace_times(out)
    return t0, first, attached


def run(cfg) -> str:
    rounds = 2 if cfg.quick else (cfg.rounds or 10)
    got = {(cmd, e): {"first": [], "ebpf": []} for cmd in ("record", "attach") for e in (True, False)}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for (cmd, ebpf), acc in got.items():      # interleaved
                out = os.path.join(tmp, f"{cmd}-{ebpf}-{r}.msgpack")
                t0, first, attached = (one_record if cmd == "record" else one_attach)(cfg, ebpf, out)
                if first is None:
                    raise RuntimeError(f"{cmd} (eBPF {'on' if ebpf else 'off'}) wrote no sample")
                acc["first"].append((first - t0) / 1e6)
                if attached is not None:
                    acc["ebpf"].append((attached - t0) / 1e6)
    rows, table_rows = [], []
    for (cmd, ebpf), acc in got.items():
        f = common.summary(acc["first"])
        e = common.summary(acc["ebpf"]) if acc["ebpf"] else None
        rows.append({"command": cmd, "ebpf": ebpf, "first_sample_ms": f, "ebpf_attached_ms": e})
        table_rows.append([cmd, "on" if ebpf else "off (--no-ebpf)", common.fmt(f, 1),
                           common.fmt(e, 0) if e else ("not attached" if ebpf else "-")])
    table = common.markdown_table(["command", "eBPF", "first sample, ms (median, min-max)",
                                   "eBPF attached, ms"], table_rows)
    common.write_result(cfg, NAME, {"rounds": rounds}, rows, table)
    return (f"### first_sample ({rounds} rounds, interleaved; record: from the program's first line; "
            f"attach: from launching sdb-sidecar)\n\n{table}\n")
