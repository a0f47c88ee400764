#!/usr/bin/env python3
"""How many samples show a stack that never existed, in the worst case for it.

A stack is copied while its thread runs. A thread that returns and calls again within the copy leaves
frames in memory that look live (docs/internals.md, "Reading the stacks of a tick"); the sampler leaves
out what its checks catch. tests/programs/call_return.rb with `flat` calls in and out as fast as it can in
a shape whose every real stack is known; this records it at 10 kHz until 20,000 samples are in, for ROUNDS
rounds per Ruby (and with --yjit where it has YJIT), and counts the samples whose stack it could not have
had. The test for the shapes the checks close is tests/integration/test_call_return.py.

    .venv/bin/python benchmarks/stale_frames.py --ruby RUBY[:GEM_HOME] [--ruby ...] [--rounds 5] [--in-context]

--in-context: with eBPF (root), running stacks read on their own CPU; only the samples after the
in-context reads began are counted.

Prints one line per Ruby and mode: wrong stacks, % of samples (median, min-max), torn (dropped).
"""
from __future__ import annotations

import argparse
import collections
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(REPO, "sidecar"), os.path.join(REPO, "symbolizer")]

from sdb_symbolize.labels import LABELS_RUBY  # noqa: E402
from sdb_symbolize.resolve import Resolver  # noqa: E402
from sdb_trace import TraceReader, iter_samples, load_tables, samples_so_far  # noqa: E402

PROGRAM = os.path.join(REPO, "tests", "programs", "call_return.rb")     # run with "flat": flat_b too
CALLER = {"Object#leaf_a": "Object#mid_a", "Object#mid_a": "Object#top_a", "Object#top_a": "Object#spin",
          "Object#flat_b": "Object#spin"}
LEAVES = {"Kernel#instance_variable_defined?", "Object#flat_b"}
SAMPLES = 20_000


def one_round(ruby: str, args: list, gem_home: str, out: str, in_context: bool = False) -> tuple:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SDB_", "RUBY", "GEM_"))}
    if gem_home:
        env["GEM_HOME"] = env["GEM_PATH"] = gem_home
    if os.path.exists(out):
        os.unlink(out)
    target = subprocess.Popen([ruby, *args, PROGRAM, "sdb", "flat"], stdout=subprocess.PIPE, env=env, text=True)
    try:
        assert target.stdout.readline().strip() == "ready"
        sidecar = subprocess.Popen([sys.executable, "-m", "sdb_sidecar.cli", "attach", "--pid", str(target.pid),
                                    "-o", out, "--rate", "10000", "--duration", "600", "-q",
                                    *([] if in_context else ["--no-ebpf"])],
                                   cwd=REPO)
        deadline = time.monotonic() + 300
        while samples_so_far(out) < SAMPLES and time.monotonic() < deadline and sidecar.poll() is None:
            time.sleep(0.2)
    finally:
        target.kill()
        target.wait()
    sidecar.wait(timeout=60)
    tables = load_tables(out)
    resolver = Resolver(tables, LABELS_RUBY)
    with TraceReader(out) as r:
        end = [rec for rec in r.records() if rec.get("t") == "end"]
    since = end[0].get("in_context_since_ns", 0) if end and in_context else 0
    wrong = total = 0
    shapes = collections.Counter()

    def on_batch(base, dts, threads, sids, states):
        nonlocal wrong, total
        for dt, sid in zip(dts, sids):
            if base + dt <= since:
                continue
            labels = [f.label for f in resolver.stack(sid, base + dt)]
            total += 1
            for i, label in enumerate(labels):
                if (label in CALLER and (i == 0 or labels[i - 1] != CALLER[label])) or \
                        (label in LEAVES and i != len(labels) - 1):
                    wrong += 1
                    shapes[" > ".join(labels[1:])] += 1
                    break

    iter_samples(out, on_batch)
    return wrong, total, end[0]["torn"] if end else -1, shapes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ruby", action="append", required=True, help="RUBY[:GEM_HOME] (the gem installed there)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default="/tmp/sdb-stale-frames.msgpack")
    ap.add_argument("--in-context", action="store_true", help="eBPF on: running stacks read on their own CPU")
    a = ap.parse_args()
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {a.rounds} rounds each, 10 kHz, {SAMPLES} samples "
          f"a round, reads {'in context (after they began)' if a.in_context else 'from outside'}")
    for spec in a.ruby:
        ruby, _, gem_home = spec.partition(":")
        modes = [[]]
        if subprocess.run([ruby, "--yjit", "-e", "exit(defined?(RubyVM::YJIT) && RubyVM::YJIT.enabled? ? 0 : 1)"],
                          capture_output=True).returncode == 0:
            modes.append(["--yjit"])
        version = subprocess.run([ruby, "-e", "print RUBY_VERSION"], capture_output=True, text=True).stdout
        for args in modes:
            rows = [one_round(ruby, args, gem_home, a.out, a.in_context) for _ in range(a.rounds)]
            pct = [100 * w / max(t, 1) for w, t, _, _ in rows]
            print(f"{version} {' '.join(args) or '(no JIT)':9} wrong stacks {[w for w, _, _, _ in rows]} of "
                  f"~{statistics.median(t for _, t, _, _ in rows):,.0f}: {statistics.median(pct):.2f}% "
                  f"({min(pct):.2f}-{max(pct):.2f}); torn (dropped) {[d for _, _, d, _ in rows]}")
            shapes = sum((s for _, _, _, s in rows), collections.Counter())
            for shape, n in shapes.most_common(3):
                print(f"    {n:6}  {shape}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
