"""Either process killed mid-recording: the trace is still complete enough to use."""
from __future__ import annotations

import signal
import time

from conftest import read_trace, run_symbolize, samples_so_far, stderr_lines, wait_for


def recording_one_second_in(ruby_target, sidecar_process, tmp_path):
    """Start parked.rb and a recording of it asked for 600 s (it cannot end by itself during the test,
    however slow a loaded machine makes it); return (target, sidecar, trace path) ~1 s after the first
    samples reached the trace."""
    target = ruby_target("parked.rb")
    out = tmp_path / "trace.msgpack"
    sidecar = sidecar_process("attach", "--pid", str(target.pid), "-d", "600", "-o", str(out), "--quiet")
    wait_for(lambda: samples_so_far(out) > 0 or sidecar.poll() is not None, 60, what="the first samples")
    time.sleep(1.0)
    assert sidecar.poll() is None, sidecar.communicate()
    return target, sidecar, out


def test_target_killed_mid_recording_ends_trace_with_target_exited(ruby_target, sidecar_process, tmp_path):
    # GIVEN a 600 s recording of a running program, ~1 s in
    target, sidecar, out = recording_one_second_in(ruby_target, sidecar_process, tmp_path)
    # WHEN the target is SIGKILLed
    target.kill()
    # THEN the sidecar exits 0 on the target's exit, not at the end of its 600 s
    _, stderr = sidecar.communicate(timeout=120)
    assert sidecar.returncode == 0, stderr
    # AND the trace's end record says why
    trace = read_trace(out)
    assert trace.end is not None, "no end record"
    assert trace.end["reason"] == "target-exited", trace.end
    assert len(trace.samples) > 0
    # AND sdb-symbolize reads it fine
    result = run_symbolize(str(out))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip(), "sdb-symbolize wrote nothing"
    assert "park_here" in result.stdout


def test_sidecar_killed_mid_recording_leaves_a_trace_symbolize_reads_with_a_warning(
        ruby_target, sidecar_process, tmp_path):
    # GIVEN a 600 s recording of a running program, ~1 s in
    target, sidecar, out = recording_one_second_in(ruby_target, sidecar_process, tmp_path)
    # WHEN the sidecar is SIGKILLed
    sidecar.send_signal(signal.SIGKILL)
    sidecar.wait(timeout=60)
    # THEN the target is unharmed
    assert target.alive()
    # AND sdb-symbolize reads the partial trace: exit 0, one warning line saying it was cut short
    result = run_symbolize(str(out))
    assert result.returncode == 0, result.stderr
    lines = stderr_lines(result.stderr)
    assert len(lines) == 1, lines
    assert "warning" in lines[0] and "cut short" in lines[0], lines[0]
    assert "park_here" in result.stdout
    assert "work_step" in result.stdout or "work_loop" in result.stdout
