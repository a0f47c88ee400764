"""`sdb-sidecar record -- ruby app.rb`: the program runs with the gem loaded and no code change, is
recorded until it exits or Ctrl-C, and its exit status is kept. `attach` and `record` end by printing
the sdb-symbolize commands to run (or run it, with --format)."""
from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
from pathlib import Path

import pytest

from conftest import (PROGRAMS, SIDECAR, assert_one_error_line, read_trace, registry_path, ruby_cmd, ruby_env,
                      samples_so_far, stderr_lines, wait_for)

GEM_NOT_INSTALLED = 12
PROGRAM = PROGRAMS / "record_me.rb"


def children_of(pid: int):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


@pytest.fixture
def start_record(tmp_path):
    """Factory: start_record(*options, program_args=(), env=None) runs `sdb-sidecar record OPTIONS --
    ruby record_me.rb ARGS` in tmp_path, as the leader of a process group of its own (as a shell runs a
    job); stdin, stdout and stderr are pipes. Everything is killed at teardown."""
    started = []

    def start(*options: str, program_args=(), env=None) -> subprocess.Popen:
        cmd = [*SIDECAR, "record", *options, "--", *ruby_cmd(PROGRAM, *program_args)]
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             cwd=str(tmp_path), env=env or ruby_env(), start_new_session=True)
        started.append(p)
        return p

    yield start
    for p in started:
        if p.poll() is None:
            kids = children_of(p.pid)
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            for kid in kids:
                try:
                    os.unlink(registry_path(kid))
                except FileNotFoundError:
                    pass
        try:
            p.communicate(timeout=10)
        except (subprocess.TimeoutExpired, ValueError):
            pass


def wait_recording(p: subprocess.Popen, trace: Path, samples: int = 50) -> None:
    wait_for(lambda: samples_so_far(trace) >= samples or p.poll() is not None, 30, what=f"{samples} samples")
    assert p.poll() is None, p.communicate()


def method_names(trace) -> set:
    return {label for sample in trace.samples for label in trace.labels_of(sample) if label}


@pytest.mark.parametrize("status,expected", [("0", 0), ("3", 3), ("TERM", 128 + signal.SIGTERM)])
def test_record_runs_the_program_with_the_gem_records_its_methods_and_keeps_its_exit_status(
        start_record, tmp_path, status, expected):
    # GIVEN a program that never requires sdb, run under `record`
    trace = tmp_path / "trace.msgpack"
    p = start_record("-o", str(trace), "-q")
    wait_recording(p, trace)
    # WHEN it is told (on its stdin, which it shares with the sidecar) to end with `status`
    out, err = p.communicate(status + "\n", timeout=30)
    # THEN record exits with the program's status (128+N for a signal), as a shell would report it
    assert p.returncode == expected, err
    # AND the program ran with the gem loaded, its output on the sidecar's stdout
    assert out.splitlines()[:2] == ["hello sdb=true", "ready"], out
    assert "bye" in out.splitlines(), out
    # AND the trace is complete and holds the program's methods
    t = read_trace(trace)
    assert t.end is not None and t.end["reason"] == "target-exited", t.end
    assert {"crunch_numbers", "record_me_work"} <= method_names(t), method_names(t)
    assert " ".join(t.header["command"]).endswith("record_me.rb"), t.header["command"]
    assert not os.path.exists(registry_path(t.header["pid"])), "the program left its registry behind"


def test_ctrl_c_to_the_process_group_ends_the_program_and_the_recording_cleanly(start_record, tmp_path):
    # GIVEN a program that works until interrupted, recorded by `record`
    trace = tmp_path / "trace.msgpack"
    p = start_record("-o", str(trace), program_args=["forever"])
    wait_recording(p, trace)
    # WHEN Ctrl-C is pressed (SIGINT to the whole foreground process group, as a terminal sends it)
    os.killpg(p.pid, signal.SIGINT)
    out, err = p.communicate(timeout=30)
    # THEN the program ran its ensure and died of SIGINT; record exits with 130, as the shell would
    assert "bye" in out.splitlines(), out
    assert p.returncode == 128 + signal.SIGINT, err
    # AND the trace is complete, says it was interrupted and holds the program's methods
    t = read_trace(trace)
    assert t.end is not None and t.end["reason"] == "interrupted", t.end
    assert len(t.samples) >= 50
    assert "crunch_numbers" in method_names(t)
    # AND the sidecar's stderr is its summary and the commands to run next, no traceback
    assert "Traceback" not in err, err
    assert f"to {trace} (interrupted" in err, err


def test_program_whose_ruby_has_no_sdb_gem_is_not_run_and_one_line_says_how_to_install_it(start_record, tmp_path):
    # GIVEN a Ruby whose gem path holds no sdb gem
    empty = tmp_path / "no-gems"
    empty.mkdir()
    env = ruby_env(with_gem=False, extra={"GEM_HOME": str(empty), "GEM_PATH": str(empty)})
    # WHEN record is asked to run a program with it
    p = start_record("-o", "trace.msgpack", env=env)
    out, err = p.communicate("0\n", timeout=60)
    # THEN one error line says the gem is missing and how to install it; a distinct exit code
    assert p.returncode == GEM_NOT_INSTALLED, err
    line = assert_one_error_line(subprocess.CompletedProcess([], p.returncode, out, err), "sdb-sidecar")
    assert "sdb gem is not installed" in line and "gem install" in line, line
    # AND the program was not started, and no trace was written
    assert out == "", out
    assert not (tmp_path / "trace.msgpack").exists()


# ------------------------------------------------------------------ what comes after a recording
NEXT = "sdb: next, make a profile with one of:"


def printed_commands(stderr: str):
    """The indented command lines attach/record print after the recording, under NEXT."""
    lines = stderr.splitlines()
    if NEXT not in lines:
        return []
    after = lines[lines.index(NEXT) + 1:]
    return [shlex.split(line) for line in after[:next((i for i, l in enumerate(after) if not l.startswith("  ")),
                                                      len(after))]]


def run_printed_commands(stderr: str, cwd: Path):
    commands = printed_commands(stderr)
    assert commands, f"no commands printed: {stderr!r}"
    assert all(c[1] == "trace.msgpack" and "--format" in c for c in commands), commands
    formats = [c[c.index("--format") + 1] for c in commands]
    assert "collapsed" in formats, formats
    for c in commands:
        r = subprocess.run(c, capture_output=True, text=True, cwd=str(cwd), timeout=120)
        assert r.returncode == 0, (c, r.stderr)
        out = cwd / c[c.index("-o") + 1]
        assert out.parent == cwd and out.stat().st_size > 0, c
    return dict(zip(formats, commands))


@pytest.mark.once
def test_attach_ends_by_printing_symbolize_commands_that_work(ruby_target, tmp_path):
    # GIVEN a recording made by attach with no --format, the trace given as a relative path
    target = ruby_target("parked.rb")
    r = subprocess.run([*SIDECAR, "attach", "--pid", str(target.pid), "-d", "1", "-o", "trace.msgpack"],
                       capture_output=True, text=True, cwd=str(tmp_path), timeout=60)
    assert r.returncode == 0, r.stderr
    # THEN it printed sdb-symbolize commands, which run as printed and write profiles next to the trace
    commands = run_printed_commands(r.stderr, tmp_path)
    collapsed = tmp_path / commands["collapsed"][commands["collapsed"].index("-o") + 1]
    assert "work_step" in collapsed.read_text()


def test_a_program_that_exits_as_the_gem_starts_keeps_its_status_and_is_no_error(tmp_path):
    # GIVEN a program that exits the moment it has loaded the gem: sdb finds its registry and the
    # process is gone while sdb attaches (the race is hit in about one run of three; 20 runs)
    for run in range(20):
        p = subprocess.run([*SIDECAR, "record", "-o", str(tmp_path / "t.msgpack"), "--",
                            *ruby_cmd("-e", "exit 7")], capture_output=True, text=True, cwd=str(tmp_path),
                           env=ruby_env(), timeout=60)
        # THEN record exits with the program's status, says nothing was recorded or what it wrote,
        # and no error (the program does not "run on": it exited; what it could not name, gone with
        # the program, follows in the same parentheses: "(the program exited; unnamed: 1 ISeq ...")
        assert p.returncode == 7, (run, p.stderr)
        assert "error" not in p.stderr, (run, p.stderr)
        assert ("before sdb could attach: nothing recorded" in p.stderr
                or re.search(r"^sdb: wrote \d+ samples .*\(the program exited[;)]", p.stderr, re.M)), (run, p.stderr)


SPIN = "def sdb_spin_a_second; t = Process.clock_gettime(Process::CLOCK_MONOTONIC); " \
       "x = 0; x += 1 while Process.clock_gettime(Process::CLOCK_MONOTONIC) - t < 1; end; sdb_spin_a_second; exit 5"


@pytest.mark.parametrize("how", ["timeout", "sh -c"])
def test_a_program_that_starts_ruby_has_that_ruby_recorded_and_keeps_its_status(tmp_path, how):
    # GIVEN a program that is not Ruby but starts it as its child: `timeout 60 ruby ...`, and a
    # shell that runs ruby (from its PATH) and then another command
    ruby = ruby_cmd("-e", SPIN)
    env = ruby_env()
    if how == "timeout":
        program = ["timeout", "60", *ruby]
    else:
        env["PATH"] = os.path.dirname(ruby[0]) + os.pathsep + env.get("PATH", "")
        program = ["sh", "-c", shlex.join(["ruby", *ruby[1:]]) + "; exit $?"]
    trace = tmp_path / "t.msgpack"
    p = subprocess.run([*SIDECAR, "record", "-o", str(trace), "--", *program], capture_output=True, text=True,
                       cwd=str(tmp_path), env=env, timeout=120)
    # THEN record exits with the program's status, says which process it recorded and who started it
    assert p.returncode == 5, p.stderr
    assert f"started by {program[0]} (pid " in p.stderr, p.stderr
    # AND the trace is that Ruby's: its command, its method, a second of samples
    t = read_trace(trace)
    assert t.header["command"][-2:] == ["-e", SPIN], t.header["command"]
    assert t.header["pid"] != p.returncode and t.end["reason"] == "target-exited", t.end
    spun = sum(1 for sample in t.samples if "sdb_spin_a_second" in t.labels_of(sample))
    assert spun >= 500, (spun, len(t.samples))


@pytest.mark.once
def test_record_prints_the_commands_and_with_format_writes_the_profile_next_to_the_trace(start_record, tmp_path):
    # GIVEN record with no --format
    trace = tmp_path / "trace.msgpack"
    p = start_record("-o", "trace.msgpack")
    wait_recording(p, trace)
    _, err = p.communicate("0\n", timeout=30)
    assert p.returncode == 0, err
    # THEN its last lines are the sdb-symbolize commands, and they work
    assert stderr_lines(err)[-1].startswith("  "), err
    run_printed_commands(err, tmp_path)
    # WHEN record is given --format collapsed
    p = start_record("-o", "again.msgpack", "--format", "collapsed")
    wait_recording(p, tmp_path / "again.msgpack")
    _, err = p.communicate("0\n", timeout=30)
    assert p.returncode == 0, err
    # THEN the profile is written beside the trace, with the program's methods
    assert (tmp_path / "again.collapsed").exists(), err
    assert "crunch_numbers" in (tmp_path / "again.collapsed").read_text()
    assert not printed_commands(err), err
