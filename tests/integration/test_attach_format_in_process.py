"""`attach --format` makes its profile in-process, with the symbolizer's library: no child Python
(nor any child) is started, and the profile is what the sdb-symbolize command it would print makes."""
from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import SYMBOLIZE

# The sidecar, run with every way of starting a child process replaced by one that leaves a mark
# and fails: a profile made by a child would not be written, and the mark says what was tried.
NO_CHILDREN = """
import os, subprocess, sys
MARK = sys.argv.pop(1)
def refuse(name):
    def started(*args, **kwargs):
        with open(MARK, "a") as f:
            f.write(f"{name} {args[:1]!r}\\n")
        raise OSError(1, f"{name}: no child processes in this test")
    return started
for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "execv", "execve", "execvp", "execvpe", "system"):
    if hasattr(os, name):
        setattr(os, name, refuse("os." + name))
subprocess.Popen.__init__ = refuse("subprocess.Popen")
from sdb_sidecar.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.once
def test_attach_format_writes_the_profile_without_starting_a_child(ruby_target, tmp_path):
    # GIVEN a Ruby program, and a sidecar that cannot start any child process
    target = ruby_target("parked.rb")
    mark = tmp_path / "children.txt"
    # WHEN it records the program with --format collapsed, the trace given as a relative path
    r = subprocess.run([sys.executable, "-c", NO_CHILDREN, str(mark), "attach", "--pid", str(target.pid), "-d", "1",
                        "--no-ebpf", "-o", "trace.msgpack", "--format", "collapsed"],
                       capture_output=True, text=True, cwd=str(tmp_path), timeout=120)
    # THEN it succeeded, tried to start no child, and wrote the profile beside the trace
    assert not mark.exists(), mark.read_text()
    assert r.returncode == 0, r.stderr
    profile = tmp_path / "trace.collapsed"
    assert "work_step" in profile.read_text(), r.stderr
    assert f"the collapsed profile beside it: trace.collapsed" in r.stderr, r.stderr
    # AND it is exactly what the sdb-symbolize command makes of the trace
    again = subprocess.run([*SYMBOLIZE, "trace.msgpack", "--format", "collapsed"], capture_output=True,
                           cwd=str(tmp_path), timeout=60)
    assert again.returncode == 0, again.stderr
    assert again.stdout == profile.read_bytes()
