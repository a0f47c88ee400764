"""sdb against stackprof on real programs from Debian: rubocop over a fixed file set (activesupport
6.1's lib, from Debian's ruby-activesupport) and asciidoctor on a fixed book (written by
tests/support/asciidoc_book.py). Each program runs once under both profilers at once: stackprof
(Debian's ruby-stackprof, wall, 1 ms, raw) inside the process (tests/programs/under_stackprof.rb),
`sdb-sidecar record` outside it, so both see the same execution. Both are folded to one naming
convention: sdb's labels as Ruby's `rb_profile_frame_full_label` gives them (`--labels
ruby-profile-frames`, stackprof's own), stackprof's `(marking)` and `(sweeping)` into `(garbage
collection)`. Compared: the main thread's self samples inside stackprof's window."""
from __future__ import annotations

import collections
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import PROGRAMS, REPO, SDB_GEM_HOME, SDB_RUBY, SIDECAR, ruby_env
from sdb_symbolize.resolve import Resolver
from sdb_symbolize.labels import LABELS_RUBY
from sdb_trace import iter_samples, load_tables

# Debian's rubocop, asciidoctor and stackprof run on Debian's Ruby (3.1). Not in `make test`: on a busy
# machine stackprof's own samples drift (its timer signals coalesce while the process waits for a CPU,
# and a sample waits for a safe point), and the rank correlation came out at 0.899 once under make
# test and two `yes` (0.925-0.951 otherwise): `make real-check`, on an otherwise idle machine.
pytestmark = [pytest.mark.once, pytest.mark.quiet_machine]

ACTIVESUPPORT = Path("/usr/share/rubygems-integration/all/gems/activesupport-6.1.7.10/lib/active_support")
STACKPROF_GC = {"(garbage collection)", "(marking)", "(sweeping)"}
TOP = 20


def record_beside_stackprof(tmp_path: Path, argv: list) -> tuple:
    """Runs `ruby under_stackprof.rb OUT argv...` under `sdb-sidecar record`: (sdb trace, stackprof dump)."""
    trace, dump = tmp_path / "trace.msgpack", tmp_path / "stackprof.dump"
    env = ruby_env(extra={"GEM_PATH": SDB_GEM_HOME + ":"} if SDB_GEM_HOME else None)
    p = subprocess.run([*SIDECAR, "record", "-q", "-o", str(trace), "--", SDB_RUBY,
                        str(PROGRAMS / "under_stackprof.rb"), str(dump), *argv],
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                       env=env, cwd=str(tmp_path), timeout=900)
    assert p.returncode in (0, 1), p.stderr    # rubocop exits 1 when it finds offenses
    return trace, dump


def stackprof_self(dump: Path) -> tuple:
    """stackprof's self samples per label, GC folded, and its window (CLOCK_MONOTONIC ns)."""
    code = ('require "json"; r = Marshal.load(File.binread(ARGV[0])); '
            'puts JSON.generate({"window" => r[:sdb_window], "frames" => r[:frames].values.map { |f| [f[:name], f[:samples]] }})')
    r = subprocess.run([SDB_RUBY, "-e", code, str(dump)], capture_output=True, text=True, check=True)
    d = json.loads(r.stdout)
    counts = collections.Counter()
    for name, n in d["frames"]:
        counts["(garbage collection)" if name in STACKPROF_GC else name] += n
    return counts, d["window"]


def sdb_self(trace: Path, window) -> collections.Counter:
    tables = load_tables(str(trace))
    assert tables.error is None, tables.error
    resolver = Resolver(tables, LABELS_RUBY)
    pid = tables.header["pid"]
    main = [s for s, th in tables.threads.items() if th["tid"] == pid]
    assert len(main) == 1, tables.threads
    counts = collections.Counter()

    def on_batch(base, dts, threads, sids, states):
        for dt, th, sid in zip(dts, threads, sids):
            if th == main[0] and window[0] <= base + dt <= window[1]:
                stack = resolver.stack(sid, base + dt)
                counts[stack[-1].label if stack else "(no frame)"] += 1

    iter_samples(str(trace), on_batch)
    return counts


def spearman(xs, ys) -> float:
    def ranks(v):
        order = sorted(range(len(v)), key=lambda i: -v[i])
        out = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                out[order[k]] = (i + j) / 2 + 1
            i = j + 1
        return out
    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    return cov / (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5


def compare(trace: Path, dump: Path) -> None:
    sp, window = stackprof_self(dump)
    sd = sdb_self(trace, window)
    n_sp, n_sd = sum(sp.values()), sum(sd.values())
    assert n_sp > 2000 and n_sd > 2000, (n_sp, n_sd)
    top = [name for name, _ in sp.most_common(TOP)]
    rho = spearman([sp[n] / n_sp for n in top], [sd[n] / n_sd for n in top])
    table = "\n".join(f"{100 * sp[n] / n_sp:6.2f} {100 * sd[n] / n_sd:6.2f}  {n}" for n in top)
    print(f"Spearman {rho:.3f} over stackprof's top {TOP} ({n_sp} stackprof, {n_sd} sdb samples)")
    # THEN the top functions rank alike (stackprof %, sdb %)
    assert rho >= 0.9, f"Spearman {rho:.3f} over stackprof's top {TOP} self functions:\n{table}"
    # AND no label of sdb's top functions lacks the class stackprof gives the same method
    qualified = {n.rsplit(sep, 1)[1]: n for n in sp for sep in ("#", ".") if sep in n}
    for name, _ in sd.most_common(TOP):
        assert name not in qualified or name == qualified[name], f"sdb says {name!r}, stackprof {qualified[name]!r}"


def test_rubocop_profile_agrees_with_stackprof(tmp_path):
    # (scripts/setup-machine installs rubocop, ruby-activesupport, asciidoctor and ruby-stackprof)
    # GIVEN rubocop over activesupport's lib, profiled by sdb and stackprof at once
    trace, dump = record_beside_stackprof(tmp_path, [shutil.which("rubocop"), "--cache", "false", "--format", "quiet",
                                                     str(ACTIVESUPPORT)])
    compare(trace, dump)


def test_asciidoctor_profile_agrees_with_stackprof(tmp_path):
    # GIVEN asciidoctor converting a fixed 10 MB book, profiled by sdb and stackprof at once
    book = tmp_path / "book.adoc"
    subprocess.run([sys.executable, str(REPO / "tests" / "support" / "asciidoc_book.py"), str(book), "600"], check=True)
    trace, dump = record_beside_stackprof(tmp_path, [shutil.which("asciidoctor"), "-o", "/dev/null", str(book)])
    compare(trace, dump)
