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

MODES = {"without sdb": ([], {}), "-rsdb": (["-rsdb"], {}), "require mid-program": ([], {"INVISIBLE_LATE_REQUIRE": "1"}),
         # the row of another patch release of this Ruby's minor, whose fields moved (the gem's
         # SDB_TEST_CORRUPT_LAYOUT=drift: rb_iseq_constant_body's offsets from its location on, 8 further)
         "-rsdb, a row with shifted fields": (["-rsdb"], {"SDB_TEST_CORRUPT_LAYOUT": "drift"})}



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


def test_backtrace_labels_from_34_name_the_class(runs):
    # Ruby's own Thread::Backtrace::Location#label says Kernel#sleep (not Kernel.sleep) from 3.4 on
    r, _ = runs["-rsdb"]
    version = subprocess.run([SDB_RUBY, "-e", "print RUBY_VERSION"], capture_output=True, text=True).stdout
    if tuple(int(x) for x in version.split(".")[:2]) < (3, 4):
        pytest.skip(f"Ruby {version}: Location#label names no class before 3.4")
    line = next(l for l in r.stdout.splitlines() if l.startswith("parked backtrace_locations"))
    assert ":1:Kernel#sleep|sleep" in line, line
    assert ":Kernel#eval|eval" in line and ":Integer#times|times" in line and ":Kernel#loop|loop" in line, line


def test_a_row_with_shifted_fields_is_refused_with_one_warning_and_the_app_unchanged(runs):
    # GIVEN the gem loaded with a layout row whose offsets moved, as a row made from another patch
    # release of the same minor would be (patch drift: docs/new-ruby-version.md)
    plain, _ = runs["without sdb"]
    r, state = runs["-rsdb, a row with shifted fields"]
    # THEN the gem proves the row wrong at require and disables itself
    assert state == "enabled=false", (state, r.stderr)
    # AND says so in exactly one line of stderr, the program's own stderr otherwise unchanged
    ours = [line for line in r.stderr.splitlines(keepends=True) if line.startswith("sdb:")]
    assert len(ours) == 1, r.stderr
    assert "does not match this Ruby" in ours[0] and "profiling disabled" in ours[0], ours[0]
    assert r.stderr.replace(ours[0], "", 1) == plain.stderr, unified(plain.stderr, r.stderr, "shifted row")
    # AND the program ran as it runs without sdb, byte for byte
    assert r.returncode == plain.returncode
    assert r.stdout == plain.stdout, unified(plain.stdout, r.stdout, "shifted row")
