"""A blocked thread's stack is reused without a read only while it cannot have changed.

On Ruby >= 3.2 the gem counts each thread's GVL acquisitions: a thread still blocked with the same
count ran no Ruby since its last read. A thread that wakes, moves to another method and blocks again
took the GVL in between, so its new stack must be read."""
from __future__ import annotations

from collections import Counter

from conftest import read_trace, run_sidecar


def test_sleeper_alternating_between_two_methods_shows_both_in_equal_shares(ruby_target, tmp_path):
    # GIVEN a thread sleeping 20 ms alternately in nap_in_a and nap_in_b
    target = ruby_target("alternating_sleeper.rb")
    out = tmp_path / "trace.msgpack"
    # WHEN it is recorded for 2 s at 1 kHz
    r = run_sidecar("attach", "--pid", str(target.pid), "-d", "2", "-o", str(out), "--quiet")
    assert r.returncode == 0, r.stderr
    trace = read_trace(out)
    serial = trace.serial_named("alternating")
    seen = Counter()
    for sample in trace.samples_of(serial):
        labels = [l for l in trace.labels_of(sample) if l]
        seen["a" if "nap_in_a" in labels else "b" if "nap_in_b" in labels else "other"] += 1
    total = sum(seen.values())
    # THEN both naps appear, each about half the time: no stale stack outlives a change
    assert total > 1500, seen
    assert 0.35 < seen["a"] / total < 0.65, seen
    assert 0.35 < seen["b"] / total < 0.65, seen
    # AND where the gem keeps thread states (Ruby >= 3.2), most of those samples needed no read
    ruby = tuple(int(x) for x in trace.header["ruby"].split(".")[:2])
    if ruby >= (3, 2):
        assert trace.end["reused"] > 0.5 * total, trace.end
