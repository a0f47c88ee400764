"""With YJIT on, a hot loop's stacks carry the same names as under the interpreter.

YJIT does not always store the pc of the frame it is running (Ruby itself reports line 0 for such a
top frame from 3.3 on), so lines may lag: what holds, and is tested, is that every line reported
for a frame lies inside that frame's method."""
from __future__ import annotations

import subprocess
from collections import Counter

import pytest

from conftest import SDB_RUBY, record_until_ready, ruby_env


def yjit_available() -> bool:
    r = subprocess.run([SDB_RUBY, "--yjit", "-e", "exit(defined?(RubyVM::YJIT) && RubyVM::YJIT.enabled? ? 0 : 1)"],
                       capture_output=True, env=ruby_env(), timeout=30)
    return r.returncode == 0


pytestmark = [pytest.mark.every_ruby, pytest.mark.skipif(not yjit_available(), reason=f"{SDB_RUBY} has no YJIT compiled in")]

# tests/programs/thread_states.rb: `def spin(n) = n + 1` on line 8, busy_loop on lines 10-13
METHOD_LINES = {"spin": range(8, 9), "busy_loop": range(10, 14)}


def busy_stacks(tmp_path, name, ruby_args):
    trace = record_until_ready(tmp_path, name, "thread_states.rb", ruby_args, "-d", "1.5")
    busy = trace.serial_named("busy")
    stacks = Counter(tuple(l for l in trace.labels_of(s) if l) for s in trace.samples_of(busy))
    return trace, busy, stacks


def test_hot_loop_under_yjit_has_the_interpreters_names_and_lines_inside_each_method(tmp_path):
    # GIVEN the same hot loop recorded under the interpreter and under YJIT
    _, _, interp = busy_stacks(tmp_path, "interp", [])
    trace, busy, jit = busy_stacks(tmp_path, "yjit", ["--yjit"])
    # THEN YJIT's stacks carry only names the interpreter's have, and the hottest stack is the same
    # (how often each appears differs: compiled, `spin` takes a far smaller share of the loop)
    assert set(jit) <= set(interp), (interp, jit)
    assert jit.most_common(1)[0][0] in interp
    assert any("busy_loop" in s for s in jit)
    # AND every line reported for spin/busy_loop under YJIT lies inside that method (0: unknown)
    tables = trace.tables
    for t_ns, serial, sid, _st in trace.samples_of(busy):
        for fid in tables.stacks[sid]:
            sym = tables.symbol_at(tables.iseqs, tables.frame_iseq[fid], t_ns) if tables.frame_kind[fid] == 0 else None
            if sym and sym.label in METHOD_LINES:
                line = tables.frame_line[fid]
                assert line == 0 or line in METHOD_LINES[sym.label], (sym.label, line)


def test_a_method_yjit_runs_without_calling_out_keeps_its_samples(tmp_path):
    # GIVEN top_target.rb under YJIT: top_caller calls top_leaf_hot (3,000 iterations of arithmetic,
    # no call out: YJIT never writes its frame's pc, which stays the one top_leaf_warm's frame left
    # in the same slot) and then top_leaf_warm (1,000 iterations)
    # WHEN it is recorded
    trace = record_until_ready(tmp_path, "top", "top_target.rb", ["--yjit"], "-d", "2", "--no-ebpf")
    sleeper = trace.serial_named("top_sleeper")
    main = [s for s in trace.samples if s[1] != sleeper]
    leaves = Counter(next((l for l in trace.labels_of(s) if l), None) for s in main)   # innermost first
    # THEN the hot method is sampled as what it is (before: every such read was dropped as torn,
    # and the hottest method of the program did not appear at all): more than the warm one
    assert leaves["top_leaf_hot"] > leaves["top_leaf_warm"] > 0, (leaves, trace.end)
    # AND its frames carry no line they cannot prove: a line inside the method, or none
    tables = trace.tables
    for t_ns, _serial, sid, _st in main:
        for fid in tables.stacks[sid]:
            sym = tables.symbol_at(tables.iseqs, tables.frame_iseq[fid], t_ns) if tables.frame_kind[fid] == 0 else None
            if sym and sym.label == "top_leaf_hot":
                assert tables.frame_line[fid] == 0 or tables.frame_line[fid] in range(8, 16), tables.frame_line[fid]
