"""Running threads' stacks read on their own CPU (eBPF: bpf/stack_in_context.c, incontext.py).

A stack copied from another CPU while its thread runs changes during the copy, and a method whose
calls are shorter than the copy lost its samples to its caller (callee_share.rb N=20: 10-16 % of the
self time by a copy from outside against stackprof's 46-48 %; benchmarks/RESULTS.md,
real_check_spread). Read in the interrupt of the thread's own CPU, the stack does not move while
it is read."""
from __future__ import annotations

import collections
import signal

import pytest

from conftest import ebpf_missing, read_trace, samples_so_far, wait_for
from ebpf_wait import wait_for_ebpf
from sdb_symbolize.labels import LABELS_RUBY
from sdb_symbolize.resolve import Resolver
from sdb_trace import iter_samples


pytestmark = [pytest.mark.every_ruby, pytest.mark.skipif(bool(ebpf_missing()), reason=f"no eBPF here: {ebpf_missing()}")]
STACKS = {("<main>", "Object#caller_of"), ("<main>", "Object#caller_of", "Object#callee"),
          ("<main>",), ("<main>", "Process.clock_gettime")}     # every stack callee_share.rb has


def record_callee_share(ruby_target, sidecar_process, tmp_path, samples: int, *args: str):
    """callee_share.rb N=20 (a caller spending half its time in a callee whose calls last under 1 us,
    half in the same loop of its own), attached with eBPF (in-context reads) until `samples` samples
    are in after the symbolizer's record (the reads are attached before it; bcc's compile takes
    seconds, a minute on a loaded machine, and the sampler does not wait for it): the trace's path, and
    the trace read."""
    target = ruby_target("callee_share.rb", "20", "600", "sdb")
    trace = tmp_path / "trace.msgpack"
    sidecar = sidecar_process("attach", "--pid", str(target.pid), "-o", str(trace), "--duration", "600", "-q", *args)
    wait_for_ebpf(sidecar, trace)
    n0 = samples_so_far(trace)
    wait_for(lambda: samples_so_far(trace) >= n0 + samples or sidecar.poll() is not None, 300,
             what=f"{samples:,} samples")
    sidecar.send_signal(signal.SIGINT)
    _, err = sidecar.communicate(timeout=60)
    assert sidecar.returncode == 0, err
    return trace, read_trace(trace)


def test_a_callee_whose_calls_are_shorter_than_a_copy_keeps_its_half_of_the_samples(ruby_target, sidecar_process,
                                                                                     tmp_path):
    # GIVEN a caller that spends half its time in a callee whose calls last under 1 us, and half
    # in the same loop of its own
    # WHEN it is recorded (eBPF on: in-context reads) until 6,000 samples are in after the reads
    trace, t = record_callee_share(ruby_target, sidecar_process, tmp_path, 6_000)
    since = t.end["in_context_since_ns"]
    # THEN the reads came from the thread's own CPU once they were in
    assert since > 0 and t.end["in_context"] > 0, t.end
    resolver = Resolver(t.tables, LABELS_RUBY)
    leaves, wrong = collections.Counter(), []

    def on_batch(base, dts, threads, sids, states):
        for dt, sid in zip(dts, sids):
            if base + dt <= since:
                continue
            labels = tuple(f.label for f in resolver.stack(sid, base + dt))
            if labels not in STACKS:
                wrong.append(labels)
            leaves[labels[-1] if labels else None] += 1

    iter_samples(str(trace), on_batch)
    n = sum(leaves.values())
    # AND from then on the callee has about half of the samples (stackprof: 46-48 %; this test
    # alone 46-49 %, but once 39.4 % inside a `make test`, not explained yet: the bound is wide,
    # copies from outside gave it 10-16 % with the program on another CPU), every stack one the
    # program has
    # (how many in context depends on the load, not asserted: 89-98 % without a CPU hog, 60-67 %
    # beside two `yes`, 17 % beside two `yes` and another `make test`, where the thread mostly waits
    # for a CPU and, not moving, is copied whole from outside: the share was 48 % there)
    assert n >= 2_000, (n, t.end)
    share = leaves["Object#callee"] / n
    assert 0.30 <= share <= 0.70, (share, t.end["in_context"], leaves.most_common(4))
    assert wrong == [], collections.Counter(wrong).most_common(4)


def test_in_context_reads_stay_at_about_1khz_when_the_sampler_ticks_at_10khz(ruby_target, sidecar_process, tmp_path):
    # GIVEN a thread that runs all the time
    # WHEN it is recorded at 10 kHz (eBPF on) until 20,000 samples are in after the reads
    end = record_callee_share(ruby_target, sidecar_process, tmp_path, 20_000, "--rate", "10000")[1].end
    # THEN its stack was copied in context at no more than ~1 kHz (each copy is a timer interrupt on
    # every CPU, in the app's time: 1.3x the loop's time at 10 kHz on a VM, the whole CPU at 100 kHz),
    # and still copied in context. A bound from above: a loaded machine only lowers the count (the
    # factor 1.5: a thread moved to the other CPU can meet that CPU's timer soon after a read)
    since = end["in_context_since_ns"]
    assert since > 0 and end["in_context"] > 0, end
    seconds = (end["at_ns"] - since) / 1e9
    assert end["in_context"] <= 1.5 * 1070 * seconds + 50, (end["in_context"], seconds, end)
