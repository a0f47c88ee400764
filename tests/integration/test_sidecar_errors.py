"""Every way `sdb-sidecar` can be pointed at the wrong thing: one line on stderr, a distinct exit code
(sidecar/sdb_sidecar/errors.py)."""
from __future__ import annotations

import os
import struct
import subprocess
import sys

import pytest

from conftest import (PROGRAMS, assert_one_error_line, read_registry, read_trace, registry_path, ruby_cmd, ruby_env,
                      run_sidecar)

NO_SUCH_PROCESS, NOT_RUBY, NO_GEM, FOREIGN_REGISTRY, REGISTRY_FORMAT, OUTPUT, GEM_DISABLED = 3, 4, 5, 6, 7, 8, 10
NOBODY = 65534


def unused_pid() -> int:
    """A pid no process has now (pid_max is far above what a test machine uses)."""
    with open("/proc/sys/kernel/pid_max") as f:
        pid_max = int(f.read())
    for pid in range(pid_max - 1, 1, -1):
        if not os.path.exists(f"/proc/{pid}"):
            return pid
    pytest.fail("no unused pid")


def attach(pid: int, tmp_path, *extra: str) -> subprocess.CompletedProcess:
    return run_sidecar("attach", "--pid", str(pid), "-d", "1", "-o", str(tmp_path / "t.msgpack"), "--quiet", *extra)


@pytest.mark.parametrize("command", ["attach", "snapshot"])
def test_no_such_pid_exits_3(tmp_path, command):
    pid = unused_pid()
    args = ["--pid", str(pid)] + (["-o", str(tmp_path / "t.msgpack"), "-d", "1"] if command == "attach" else [])
    result = run_sidecar(command, *args)
    assert result.returncode == NO_SUCH_PROCESS, result.stderr
    line = assert_one_error_line(result, "sdb-sidecar")
    assert str(pid) in line
    assert not (tmp_path / "t.msgpack").exists()


def test_process_that_is_not_ruby_exits_4(other_process, tmp_path):
    proc = other_process(["sleep", "30"])
    result = attach(proc.pid, tmp_path)
    assert result.returncode == NOT_RUBY, result.stderr
    line = assert_one_error_line(result, "sdb-sidecar")
    assert "not a Ruby process" in line
    assert not (tmp_path / "t.msgpack").exists()


def test_ruby_without_the_gem_exits_5_and_says_require_sdb(ruby_target, tmp_path):
    target = ruby_target("plain_ruby.rb", with_gem=False)
    result = attach(target.pid, tmp_path)
    assert result.returncode == NO_GEM, result.stderr
    line = assert_one_error_line(result, "sdb-sidecar")
    assert 'require "sdb"' in line
    assert not (tmp_path / "t.msgpack").exists()


def test_registry_owned_by_another_user_exits_6(ruby_target, tmp_path):
    # GIVEN a target with the gem whose registry is then chowned to nobody
    target = ruby_target("parked.rb")
    os.chown(target.registry, NOBODY, NOBODY)
    # WHEN attaching THEN refused: the app did not write that file
    result = attach(target.pid, tmp_path)
    assert result.returncode == FOREIGN_REGISTRY, result.stderr
    line = assert_one_error_line(result, "sdb-sidecar")
    assert target.registry in line
    assert not (tmp_path / "t.msgpack").exists()


def write_fake_registry(pid: int, version: int, size: int) -> str:
    """A registry file with the right magic and `version`, as the process's user, mode 0600."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read()
    start_ticks = int(data[data.rindex(b")") + 2:].split()[19])
    header_size, slot_size, slot_count, slots_offset = 888, 192, 1024, 896  # format 3: sizeof header, slot
    head = struct.pack("<8sIIIIIIIIQQQ", b"SDBREG\0\0", version, header_size, slot_size, slot_count,
                       slots_offset, pid, 1, 0, start_ticks, 0, 0)
    path = registry_path(pid)
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    try:
        os.write(fd, head)
        os.ftruncate(fd, size)
    finally:
        os.close(fd)
    st = os.stat(f"/proc/{pid}")
    os.chown(path, st.st_uid, st.st_gid)
    return path


def test_registry_of_unknown_format_version_exits_7(ruby_target, tmp_path):
    # GIVEN a real registry's size, and a Ruby process without the gem holding a fake version-99 registry
    real = ruby_target("parked.rb")
    size = os.path.getsize(real.registry)
    assert size >= read_registry(real.registry)["slots_offset"] + 1024 * 192
    target = ruby_target("plain_ruby.rb", with_gem=False)
    path = write_fake_registry(target.pid, 99, size)  # removed by the fixture's cleanup
    # WHEN attaching THEN refused with the version in the message
    result = attach(target.pid, tmp_path)
    assert result.returncode == REGISTRY_FORMAT, result.stderr
    line = assert_one_error_line(result, "sdb-sidecar")
    assert "99" in line and path in line
    assert not (tmp_path / "t.msgpack").exists()


@pytest.mark.parametrize("output", ["/nonexistent/dir/t.msgpack", "{tmp}/a-file/t.msgpack", "{tmp}"])
def test_unwritable_output_path_exits_8_and_leaves_no_file(ruby_target, tmp_path, output):
    target = ruby_target("parked.rb")
    (tmp_path / "a-file").write_text("not a directory")
    out = output.format(tmp=tmp_path)
    before = sorted(os.listdir(tmp_path))
    result = run_sidecar("attach", "--pid", str(target.pid), "-d", "1", "-o", out, "--quiet")
    assert result.returncode == OUTPUT, result.stderr
    line = assert_one_error_line(result, "sdb-sidecar")
    assert out in line
    assert not os.path.exists("/nonexistent/dir/t.msgpack")
    assert sorted(os.listdir(tmp_path)) == before, "a partial file was left"


@pytest.mark.parametrize("command", ["attach", "snapshot"])
def test_gem_disabled_by_force_layout_exits_10_with_the_gems_reason(ruby_target, tmp_path, command):
    # GIVEN a target whose gem refused to run (SDB_FORCE_LAYOUT names no layout row)
    target = ruby_target("parked.rb", env={"SDB_FORCE_LAYOUT": "9.9"})
    assert '"sdb_enabled":false' in target.ready_line
    args = ["--pid", str(target.pid)] + (["-o", str(tmp_path / "t.msgpack"), "-d", "1"] if command == "attach" else [])
    result = run_sidecar(command, *args)
    assert result.returncode == GEM_DISABLED, result.stderr
    line = assert_one_error_line(result, "sdb-sidecar")
    # THEN the message carries the gem's own reason (what it warned in the target)
    assert "SDB_FORCE_LAYOUT=9.9" in line, line
    gem_warning = [l for l in target.stderr().splitlines() if l.startswith("sdb:")]
    assert gem_warning, target.stderr()
    assert gem_warning[0][len("sdb: "):] in line
    assert not (tmp_path / "t.msgpack").exists()


# a sidecar whose Drainer fails at its 4th drain, as a defect of sdb's would: the sidecar as users run
# it, with that one method replaced
FAILING_DRAIN = """
import sys
from sdb_sidecar.recording import drainer
drain, calls = drainer.Drainer.drain, []
def failing(self, *a, **k):
    calls.append(1)
    if len(calls) == 4:
        raise RuntimeError("drain failed on purpose")
    return drain(self, *a, **k)
drainer.Drainer.drain = failing
from sdb_sidecar.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("command", ["attach", "record"])
def test_a_defect_in_a_recording_thread_exits_1_with_one_line_and_keeps_the_trace(ruby_target, tmp_path, command):
    # GIVEN a recording whose process thread raises at its 4th drain (a bug of sdb's): of a running
    # program (attach), or of one `record` runs for 3 s
    out = tmp_path / "t.msgpack"
    options = ["-o", str(out), "--quiet", "--no-ebpf"]
    if command == "attach":
        target = ruby_target("short_work.rb", "each", "wait")
        argv = ["attach", "--pid", str(target.pid), "-d", "30", *options]
    else:
        argv = ["record", *options, "--", *ruby_cmd(PROGRAMS / "short_work.rb", "each", "3")]
    result = subprocess.run([sys.executable, "-c", FAILING_DRAIN, *argv], capture_output=True, text=True,
                            timeout=120, cwd=str(tmp_path), env=ruby_env(), stdin=subprocess.DEVNULL)
    # THEN it ends with exit 1 (`record`: once the program is over) and one line that says what failed,
    # where, and that the trace holds what came before
    assert result.returncode == 1, (result.returncode, result.stderr[-2000:])
    line = assert_one_error_line(result, "sdb-sidecar")
    assert "internal error" in line and "drain failed on purpose" in line and str(out) in line, line
    assert "drainer.py" not in line and "<string>:" in line, line      # where it was raised: the replaced method
    # AND the trace is whole: its end record says why it ended, and the samples drained before are in it
    t = read_trace(out)
    assert t.end is not None and t.end["reason"] == "error", t.end
    assert len(t.samples) > 0
