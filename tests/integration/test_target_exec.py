"""A recorded program that execs another one keeps its pid but none of the memory its registry points
into: the recording ends there ("target-exec"), with the trace whole, instead of reading the stale
registry on (which gave ~80,000 failed reads in 4 s)."""
from __future__ import annotations

from conftest import read_trace, samples_so_far, wait_for


def test_recording_ends_cleanly_when_the_target_execs(ruby_target, sidecar_process, tmp_path):
    # GIVEN a Ruby program with a busy thread, recorded
    target = ruby_target("execs.rb")
    out = tmp_path / "trace.msgpack"
    sidecar = sidecar_process("attach", "--pid", str(target.pid), "-o", str(out), "--duration", "120", "-q",
                              "--no-ebpf")
    wait_for(lambda: samples_so_far(out) > 0 or sidecar.poll() is not None, 60, what="first samples")
    # WHEN it execs `sleep 30`
    target.send("go\n")
    # THEN the sidecar ends by itself, exit 0, saying why
    _, err = sidecar.communicate(timeout=60)
    assert sidecar.returncode == 0, err
    assert target.proc.poll() is None          # the new program still runs, under the same pid
    trace = read_trace(out)
    assert trace.end["reason"] == "target-exec", trace.end
    assert trace.end["samples"] > 0
    # (the reads that failed between the exec and its notice, `errors`, are as many as the ticks until
    # the drain thread's next check of /proc/PID/maps: a number that grows with the machine's load,
    # 1,002 once under a heavy one; the reason above is what proves the notice)
