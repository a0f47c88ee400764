"""A blocked thread's stack is reused without a read only while it cannot have changed.

On Ruby >= 3.2 the gem counts each thread's GVL acquisitions: a thread still blocked with the same
count ran no Ruby since its last read. On 3.1 the kernel counts its switch-ins instead (the kernel
view, bpf/thread_switches.c, where eBPF can be used; procfs otherwise): a thread read while off a CPU
and not switched in since ran nothing. A thread that wakes, moves to another method and blocks again
took the GVL (and a CPU) in between, so its new stack must be read."""
from __future__ import annotations

import signal
from collections import Counter

import pytest

from conftest import ebpf_all_in_so_far, kernel_view_missing, read_trace, samples_so_far, wait_for
from ebpf_wait import ANY_MISSING, EVERY_PROGRAM, wait_for_ebpf


def record(ruby_target, sidecar_process, tmp_path, program: str, ebpf: bool, samples: int):
    """`program` recorded at 1 kHz, with eBPF where the machine has it (from the moment it is attached:
    it attaches beside the sampling) or without, until the trace holds `samples` more samples than
    then (about 2 s of them; counted, not timed: a busy machine lets the sampler take fewer ticks a
    second); the trace."""
    target = ruby_target(program)
    out = tmp_path / "trace.msgpack"
    with_kview = ebpf and not kernel_view_missing()
    sidecar = sidecar_process("attach", "--pid", str(target.pid), "-d", "600", "-o", str(out), "--quiet",
                              *([] if ebpf else ["--no-ebpf"]))
    if with_kview:
        # (on 3.1 the kernel view comes after the symbolizer: a busy machine can take seconds)
        wait_for_ebpf(sidecar, lambda: ebpf_all_in_so_far(out), what=EVERY_PROGRAM, missing=ANY_MISSING)
    else:
        wait_for(lambda: samples_so_far(out) > 0 or sidecar.poll() is not None, 60, what="first samples")
    assert sidecar.poll() is None, sidecar.communicate()[1]
    n0 = samples_so_far(out)
    wait_for(lambda: samples_so_far(out) >= n0 + samples or sidecar.poll() is not None, 300,
             what=f"{samples} more samples")
    sidecar.send_signal(signal.SIGINT)
    _, err = sidecar.communicate(timeout=60)
    assert sidecar.returncode == 0, err
    return read_trace(out)


@pytest.mark.parametrize("ebpf", [True, False], ids=["default", "no-ebpf"])
def test_sleeper_alternating_between_two_methods_shows_both_in_equal_shares(ruby_target, sidecar_process, tmp_path,
                                                                            ebpf):
    # GIVEN a thread sleeping 20 ms alternately in nap_in_a and nap_in_b
    # WHEN it is recorded at 1 kHz for ~2 s of samples of its two threads (with eBPF where the machine
    # has it, and without)
    trace = record(ruby_target, sidecar_process, tmp_path, "alternating_sleeper.rb", ebpf, 4000)
    serial = trace.serial_named("alternating")
    attached = [r["at_ns"] for r in trace.records if r["t"] in ("ebpf_attached", "kernel_view")]
    seen = Counter()
    for sample in trace.samples_of(serial):
        if attached and sample[0] < max(attached):
            continue        # the samples measured are those after eBPF (and the kernel view) came
        labels = [l for l in trace.labels_of(sample) if l]
        seen["a" if "nap_in_a" in labels else "b" if "nap_in_b" in labels else "other"] += 1
    total = sum(seen.values())
    # THEN both naps appear, each about half the time: no stale stack outlives a change
    assert total > 1500, seen
    assert 0.35 < seen["a"] / total < 0.65, seen
    assert 0.35 < seen["b"] / total < 0.65, seen
    # AND where the gem keeps thread states (Ruby >= 3.2), or the kernel view does (3.1 with eBPF),
    # most of those samples needed no read
    ruby = tuple(int(x) for x in trace.header["ruby"].split(".")[:2])
    expected = "gem" if ruby >= (3, 2) else "procfs" if kernel_view_missing() or not ebpf else "kernel_view"
    assert trace.end["threads_from"] == expected, trace.end
    if expected != "procfs":
        assert trace.end["reused"] > 0.5 * total, trace.end


@pytest.mark.parametrize("ebpf", [True, False], ids=["default", "no-ebpf"])
def test_threads_asleep_for_good_are_read_once_then_reused(ruby_target, sidecar_process, tmp_path, ebpf):
    # GIVEN an app whose main thread and one more sleep for good, beside a busy worker (on 3.1 with the
    # kernel view, a thread that never switches again must still be known to be off its CPU)
    # WHEN it is recorded at 1 kHz for ~2 s of samples of its three threads
    end = record(ruby_target, sidecar_process, tmp_path, "parked.rb", ebpf, 4500).end
    # THEN the two sleepers' samples (two thirds of all) needed no read after the first ones
    assert end["threads"] == 3 and end["samples"] > 4000, end
    assert end["reused"] > 0.6 * end["samples"], end
