#!/usr/bin/env python3
"""The spread of the real-program check (tests/integration/test_real_programs.py) over rounds, with
and without CPU hogs, and the bias behind it.

Each round records rubocop and asciidoctor as the check does (sdb-sidecar record outside, stackprof
wall 1 ms raw inside, the same run) and prints Spearman's rank correlation of the top 20 self
functions two ways: by self time (the check's: stackprof's samples weighted by raw_timestamp_deltas)
and by sample counts (what the check compared before). `--hogs 2` runs two `yes > /dev/null` beside
it. `--callee N` instead records tests/programs/callee_share.rb (a callee taking half the time
in calls of N loop steps) and prints the callee's self share by sdb and by stackprof. Debian's Ruby,
its rubocop, asciidoctor and stackprof (scripts/setup-machine installs them); the gem in the Ruby's
own gem path (SDB_GEM_HOME= as make test) unless SDB_GEM_HOME says where.

    .venv/bin/python benchmarks/real_check_spread.py [--rounds 4] [--hogs 2] [--callee 20]
"""
from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "sidecar"), str(REPO / "symbolizer"), str(REPO / "tests"),
                str(REPO / "tests" / "integration")]
os.environ.setdefault("SDB_GEM_HOME", "")

import test_real_programs as check  # noqa: E402
from profile_compare import compare_self  # noqa: E402


def stackprof_counts(dump: Path) -> collections.Counter:
    """stackprof's self samples per label (its frames' own counts)."""
    code = ('r = Marshal.load(File.binread(ARGV[0])); '
            'r[:frames].each_value { |f| puts "#{f[:samples]}\\t#{f[:name]}" }')
    out = subprocess.run([check.SDB_RUBY, "-e", code, str(dump)], capture_output=True, text=True, check=True).stdout
    sp = collections.Counter()
    for line in out.splitlines():
        n, name = line.split("\t", 1)
        sp[check.fold(name)] += int(n)
    return sp


def one_round(tmp: Path, name: str, argv: list) -> str:
    trace, dump = check.record_beside_stackprof(tmp, argv)
    sp, n_sp, window = check.stackprof_self(dump, check.in_context_since(trace))
    sd, sd_counts = check.sdb_self(trace, window)
    n_sd = sum(sd_counts.values())
    by_time = compare_self(sp, sd)
    by_count = compare_self(stackprof_counts(dump), sd_counts)
    bare = sum(pct for _, pct, _ in by_time.unqualified)
    return (f"{name:12} by time {by_time.rho:.3f}  by count {by_count.rho:.3f}  samples {n_sp}/{n_sd}  "
            f"bare labels {len(by_time.unqualified)} ({bare:.2f} % of sdb's time)")


def callee_round(tmp: Path, n: int) -> str:
    trace, dump = check.record_beside_stackprof(tmp, [str(REPO / "tests" / "programs" / "callee_share.rb"),
                                                       str(n), "4"])
    sp, _, window = check.stackprof_self(dump, check.in_context_since(trace))
    sd, _ = check.sdb_self(trace, window)
    share = lambda p: 100 * p.get("Object#callee", 0) / sum(p.values())     # noqa: E731
    top = ", ".join(f"{k} {100 * v / sum(sd.values()):.1f}" for k, v in sd.most_common(4))
    return f"callee N={n}: stackprof {share(sp):.1f} %, sdb {share(sd):.1f} % of the self time (sdb: {top})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--hogs", type=int, default=0, help="this many `yes > /dev/null` beside it")
    ap.add_argument("--callee", type=int, help="record callee_share.rb with this N instead")
    a = ap.parse_args()
    hogs = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(a.hogs)]
    try:
        for r in range(a.rounds):
            with tempfile.TemporaryDirectory() as d:
                tmp = Path(d)
                if a.callee:
                    print(f"round {r}: {callee_round(tmp, a.callee)}", flush=True)
                    continue
                book = tmp / "book.adoc"
                subprocess.run([sys.executable, str(REPO / "tests" / "support" / "asciidoc_book.py"), str(book),
                                str(check.BOOK_CHAPTERS)], check=True)
                (tmp / "r").mkdir()
                (tmp / "a").mkdir()
                print(f"round {r}: " + one_round(tmp / "r", "rubocop", [
                    shutil.which("rubocop"), "--cache", "false", "--format", "quiet", *map(str, check.RUBOCOP_FILES)]),
                    flush=True)
                print(f"round {r}: " + one_round(tmp / "a", "asciidoctor", [
                    shutil.which("asciidoctor"), "-o", "-", str(book)]), flush=True)
    finally:
        for h in hogs:
            h.kill()
            h.wait()


if __name__ == "__main__":
    main()
