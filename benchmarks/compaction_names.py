#!/usr/bin/env python3
"""Wrong names under GC compaction: benchmarks/programs/compaction_churn.rb (GC.compact every 10 ms while
methods are defined by class_eval strings, define_method and Class.new, run, eval'd and removed) recorded
with `sdb-sidecar attach --rate 10000` beside two `yes`, RUNS runs of SECONDS each per Ruby. Counts the
Ruby frames whose path is not a file, an eval's name or a Ruby internal (a wrong name: issue 44 saw
150-290 of ~185,000 samples so), and the frames left unnamed. eBPF is used when the sidecar can (root):
each run waits for it to attach (up to EBPF_PATIENCE_S) and counts SECONDS of samples from then.

    .venv/bin/python benchmarks/compaction_names.py --ruby RUBY[:GEM_HOME] [--ruby ...] [--runs 3] [--seconds 20] [--no-wait-ebpf]

Prints one line per run and one per Ruby: samples, Ruby frames, wrong paths, unnamed frames, eBPF pauses.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(REPO, "sidecar"), os.path.join(REPO, "symbolizer")]

from sdb_trace import KIND_RUBY, TraceReader, iter_samples, load_tables  # noqa: E402
from sdb_trace.tables import has_record  # noqa: E402

PROGRAM = os.path.join(REPO, "benchmarks", "programs", "compaction_churn.rb")
SIDECAR = os.path.join(REPO, ".venv", "bin", "sdb-sidecar")


def a_file_or_eval(path: str) -> bool:
    return (os.path.isabs(path) and os.path.exists(path)) or path.startswith("(eval") or path.startswith("<internal:")


# a label Ruby gives an ISeq of the program: a method's name, a block's, a class body's, <main> ...; not
# one of the program's Strings (a number, an eval's source). <compiled>: 3.4's eval (prism)
LABEL = re.compile(r"^(block (\(\d+ levels\) )?in )?(<main>|<compiled>|<top \(required\)>|<class:\w+>|<module:\w+>|"
                   r"[A-Za-z_][A-Za-z0-9_]*[?!=]?|<internal:\w+>)$")


def a_label(label: str) -> bool:
    return bool(LABEL.match(label))


def count(trace: str, from_attach: bool = False) -> dict:
    """Samples, Ruby frames, frames with a wrong path or label, unnamed frames: each frame named as the
    symbolizer joins it (Tables.symbol_at, by address, time and copy window). `wrong_records`: the
    records that gave a wrong name (their source says which read), with the first sample that used each."""
    t = load_tables(trace)
    since = None
    if from_attach:
        with TraceReader(trace) as reader:
            since = next((rec["at_ns"] for rec in reader.records() if rec["t"] == "ebpf_attached"), None)
    c = {"since": since, "samples": 0, "frames": 0, "wrong": 0, "unnamed": 0, "pauses": len(t.ebpf_pauses), "wrong_paths": set(),
         "wrong_records": {}, "ebpf": (t.end or {}).get("ebpf")}

    def on_batch(base, dts, threads, stacks, states, wins):
        for dt, sid, w in zip(dts, stacks, wins):
            at = base + dt
            if since is not None and at < since:
                continue
            c["samples"] += 1
            for fid in t.stacks[sid]:
                if t.frame_kind[fid] != KIND_RUBY:
                    continue
                c["frames"] += 1
                s = t.symbol_at(t.iseqs, t.frame_iseq[fid], at, at - w * 1000 if w else None)
                if s is None or s.label == "(unknown)":
                    c["unnamed"] += 1
                elif not a_file_or_eval(s.path) or not a_label(s.label):
                    c["wrong"] += 1
                    c["wrong_paths"].add(f"{s.label[:40]} ({s.path[:60]})")
                    c["wrong_records"].setdefault(id(s.record), (s.record, at, w))
    iter_samples(trace, on_batch, windows=True)
    return c


# eBPF's compile (bcc, clang) beside two `yes` and the churn can take tens of seconds: the window counted
# starts when eBPF attached (its `ebpf_attached` record), so every run has SECONDS of names from births
EBPF_PATIENCE_S = 180


def run_once(ruby: str, gem_home: str, seconds: float, out: str, wait_ebpf: bool) -> dict:
    env = dict(os.environ)
    if gem_home:
        env.update(GEM_HOME=gem_home, GEM_PATH=gem_home)
    hogs = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(2)]
    app = subprocess.Popen([ruby, PROGRAM], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    try:
        if app.stdout.readline().strip() != b"ready":
            raise SystemExit(f"{PROGRAM} did not start under {ruby}")
        side = subprocess.Popen([SIDECAR, "attach", "--pid", str(app.pid), "--rate", "10000", "-q", "-o", out],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        began = time.monotonic()
        while wait_ebpf and not has_record(out, "ebpf_attached") and time.monotonic() - began < EBPF_PATIENCE_S \
                and side.poll() is None:
            time.sleep(0.5)
        attach_s = time.monotonic() - began
        time.sleep(seconds)
        side.send_signal(signal.SIGINT)
        _, err = side.communicate(timeout=120)
        if side.returncode != 0:
            raise SystemExit(f"sdb-sidecar failed: {err.strip()}")
    finally:
        app.stdin.close()
        app.wait(timeout=30)
        for h in hogs:
            h.send_signal(signal.SIGTERM)
            h.wait()
    c = count(out, from_attach=wait_ebpf)
    c["attach_s"] = attach_s
    return c


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ruby", action="append", required=True, help="RUBY[:GEM_HOME] (empty GEM_HOME: the Ruby's own gems)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--no-wait-ebpf", action="store_true", help="count from the first sample, not from "
                    "when eBPF attached")
    ap.add_argument("--keep", metavar="DIR", help="keep the traces that show a wrong name in DIR, and the "
                    "records that gave it (DIR/runN.wrong.json)")
    args = ap.parse_args()
    for spec in args.ruby:
        ruby, _, gem_home = spec.partition(":")
        total = {"samples": 0, "frames": 0, "wrong": 0, "unnamed": 0}
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(args.runs):
                out = os.path.join(tmp, f"run{i}.msgpack")
                c = run_once(ruby, gem_home, args.seconds, out, not args.no_wait_ebpf)
                if c["wrong"] and args.keep:
                    os.makedirs(args.keep, exist_ok=True)
                    kept = os.path.join(args.keep, f"{os.path.basename(ruby)}-{int(time.time())}-run{i}")
                    os.replace(out, kept + ".msgpack")
                    with open(kept + ".wrong.json", "w") as f:
                        json.dump([{"record": r, "sample_ns": at, "window_us": w}
                                   for r, at, w in c["wrong_records"].values()], f, default=repr, indent=1)
                    print(f"kept {kept}.msgpack", flush=True)
                print(f"{ruby} run {i + 1}: {c['samples']} samples, {c['frames']} Ruby frames, wrong paths "
                      f"{c['wrong']} {sorted(c['wrong_paths'])[:5]}, unnamed {c['unnamed']}, eBPF pauses "
                      f"{c['pauses']}, eBPF attached after {c['attach_s']:.1f} s "
                      f"({'counted from then' if c['since'] else 'NOT attached: every sample counted'}), "
                      f"eBPF {json.dumps(c['ebpf'], default=repr)[:300]}", flush=True)
                for k in total:
                    total[k] += c[k]
                time.sleep(1)
        print(f"{ruby}: {args.runs} runs of {args.seconds:g} s: {total['samples']} samples, {total['frames']} Ruby "
              f"frames, wrong paths {total['wrong']}, unnamed {total['unnamed']}", flush=True)


if __name__ == "__main__":
    main()
