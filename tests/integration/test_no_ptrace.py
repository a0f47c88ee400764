"""The sidecar reads the target's memory without stopping it: no ptrace call, no SIGSTOP."""
from __future__ import annotations

import glob
import shutil
import time

import pytest

from conftest import read_trace


def task_states(pid: int) -> dict:
    """State letter of every thread of `pid` (/proc/PID/task/*/status)."""
    states = {}
    for status in glob.glob(f"/proc/{pid}/task/*/status"):
        try:
            with open(status) as f:
                for line in f:
                    if line.startswith("State:"):
                        states[status.split("/")[4]] = line.split()[1]
                        break
        except OSError:
            pass  # a thread that just ended
    return states


@pytest.mark.skipif(shutil.which("strace") is None,
                    reason="strace is not installed (scripts/setup-machine installs it): cannot check syscalls")
def test_sidecar_makes_no_ptrace_call_and_never_stops_the_target(ruby_target, sidecar_process, tmp_path):
    # GIVEN a Ruby program with a parked and a busy thread
    target = ruby_target("parked.rb")
    out = tmp_path / "trace.msgpack"
    strace_log = tmp_path / "strace.log"
    # WHEN the sidecar records it for 1 s under strace, and we watch the target's thread states
    sidecar = sidecar_process("attach", "--pid", str(target.pid), "-d", "1", "-o", str(out), "--quiet",
                              prefix=["strace", "-f", "-qq", "-e", "trace=ptrace", "-o", str(strace_log)])
    seen_states = set()
    stopped = []
    polls = 0
    deadline = time.monotonic() + 30
    while sidecar.poll() is None and time.monotonic() < deadline:
        states = task_states(target.pid)
        seen_states.update(states.values())
        polls += 1
        stopped += [(tid, s) for tid, s in states.items() if s in ("t", "T")]
        time.sleep(0.002)
    _, stderr = sidecar.communicate(timeout=10)
    assert sidecar.returncode == 0, stderr
    # THEN strace saw no ptrace call from the sidecar or any of its threads/children
    assert strace_log.exists(), "strace wrote no log"
    calls = [line for line in strace_log.read_text().splitlines() if "ptrace(" in line]
    assert not calls, f"the sidecar called ptrace: {calls[:5]}"
    # AND the trace has samples
    trace = read_trace(out)
    assert len(trace.samples) > 0
    assert trace.end is not None and trace.end["reason"] == "duration"
    # AND no thread of the target was ever stopped (t: tracing stop, T: SIGSTOP) while sampled
    assert seen_states and polls >= 50, f"read the target's thread states only {polls} times"
    assert not stopped, f"target threads seen stopped: {stopped[:5]}"
    assert target.alive()
