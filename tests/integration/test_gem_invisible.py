"""The gem is invisible to the app: tests/programs/invisible.rb prints what a program, its error
tracker and its profilers observe (exceptions raised in threads made every way with their
backtraces, backtrace_locations and full_message, Thread#inspect, caller_locations, the labels of
Ruby's own profiling API for Kernel#sleep/loop/eval/Integer#times through tests/support/golden
(rb_profile_frames + rb_profile_frame_full_label), Thread.list, ObjectSpace counts, the core
methods as reflection shows them, fork then exec, at_exit order, a Ractor making a thread), and
its stdout and stderr must be the same byte for byte without sdb, with `-rsdb`, and with
`require "sdb"` in the middle of the program (after a thread and an at_exit handler exist).
Runs on the Ruby under test (SDB_RUBY, SDB_RUBY_ARGS: with and without --yjit)."""
from __future__ import annotations

import difflib
import subprocess

import pytest

from conftest import PROGRAMS, SDB_RUBY, SDB_RUBY_ARGS, ruby_env

pytestmark = pytest.mark.every_ruby

MODES = {"without sdb": ([], {}), "-rsdb": (["-rsdb"], {}), "require mid-program": ([], {"INVISIBLE_LATE_REQUIRE": "1"})}



@pytest.fixture(scope="module")
def runs(golden_ext, tmp_path_factory):
    """invisible.rb run once per mode: {mode: (CompletedProcess, sdb state)}."""
    out = {}
    for mode, (flags, extra) in MODES.items():
        tmp = tmp_path_factory.mktemp("invisible")
        state = tmp / "sdb-state"
        env = ruby_env(extra={"SDB_GOLDEN_DIR": golden_ext, "INVISIBLE_SDB_STATE": str(state), **extra})
        r = subprocess.run([SDB_RUBY, *SDB_RUBY_ARGS, *flags, str(PROGRAMS / "invisible.rb")], capture_output=True,
                           text=True, timeout=180, cwd=str(tmp), env=env, stdin=subprocess.DEVNULL)
        out[mode] = (r, state.read_text() if state.exists() else "no state file")
    return out


def unified(a: str, b: str, what: str) -> str:
    return "\n".join(difflib.unified_diff(a.splitlines(), b.splitlines(), "without sdb", what, lineterm=""))


def test_program_runs_to_its_end_without_sdb(runs):
    r, state = runs["without sdb"]
    assert r.returncode == 0, r.stderr
    assert state == "not loaded"
    # the observables are really there (a run that printed nothing would compare equal)
    assert "end of main" in r.stdout and r.stdout.rstrip().endswith("at_exit 1 (registered first)")
    assert '"Kernel#sleep@' in r.stdout and '"Kernel#loop@' in r.stdout and '"Kernel#eval@' in r.stdout
    assert '"Integer#times@' in r.stdout
    assert "exec ok" in r.stdout and "ractor's thread: #<Thread:0x_" in r.stdout


@pytest.mark.parametrize("mode", ["-rsdb", "require mid-program"])
def test_stdout_and_stderr_are_identical_with_sdb(runs, mode):
    plain, _ = runs["without sdb"]
    r, state = runs[mode]
    # GIVEN sdb loaded and enabled (a disabled gem would also warn on stderr)
    assert state == "enabled=true", (state, r.stderr)
    # THEN the program sees exactly what it sees without sdb
    assert r.returncode == plain.returncode
    assert r.stdout == plain.stdout, unified(plain.stdout, r.stdout, mode)
    assert r.stderr == plain.stderr, unified(plain.stderr, r.stderr, mode)
    assert "sdb" not in r.stdout.replace("sdb_golden", "")


def test_backtrace_labels_on_34_name_the_class(runs):
    # Ruby 3.4's own Thread::Backtrace::Location#label says Kernel#sleep (not Kernel.sleep)
    r, _ = runs["-rsdb"]
    version = subprocess.run([SDB_RUBY, "-e", "print RUBY_VERSION"], capture_output=True, text=True).stdout
    if not version.startswith("3.4"):
        pytest.skip(f"Ruby {version}: Location#label names no class before 3.4")
    line = next(l for l in r.stdout.splitlines() if l.startswith("parked backtrace_locations"))
    assert ":1:Kernel#sleep|sleep" in line, line
    assert ":Kernel#eval|eval" in line and ":Integer#times|times" in line and ":Kernel#loop|loop" in line, line
