"""The Drainer's reads of ISeq names (sdb_sidecar.recording.drainer.Drainer.name_remotely) against a made-up target
whose reads fail as a GC compaction makes them fail: a read that fails on what passes is read again at
the next drains and names the sample's ISeq from the sample's own window; one that keeps failing, or an
ISeq replaced at the address, is written (unknown) and counted; the last read of a recording is final.
A read taken while a GC sweep that started after the sample is in progress (or that one ran through)
is not trusted: read again, named once no sweep can have freed the name's Strings."""
from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from sdb_sidecar.recording import drainer
from sdb_sidecar.recording.drainer import UNKNOWN_ISEQ, Drainer
from sdb_sidecar.target.symbols import RemoteReadError

pytestmark = pytest.mark.once
A = 0x7f0000001000
INSTRUCTIONS = 0x5550000
NAME = {"label": "block in <main>", "base_label": "<main>", "path": "/app/soak.rb", "realpath": "/app/soak.rb",
        "first_line": 79, "type": 2}


class Remote:
    """The target as RemoteRuby reads it: the ISeq at A runs INSTRUCTIONS; its name's first `failures`
    reads fail (its strings moved while they were read)."""

    def __init__(self, failures: int, instructions: int = INSTRUCTIONS):
        self.failures = failures
        self.instructions = instructions
        self.L = {"body_iseq_encoded": 8}
        self.reads = 0
        self.sweeps = 0             # GC sweeps started so far
        self.sweeping = False       # the last of them still in progress

    def forget(self, addr):
        pass

    def gc_calm(self, closing=None):
        state = None if self.sweeping else self.sweeps
        return state if closing is None else (state is not None and state == closing)

    def gc_sweeps_started(self):
        return self.sweeps

    def iseq_body(self, addr):
        return addr + 0x100

    def u64(self, addr, what):
        return self.instructions

    def iseq_info(self, addr):
        self.reads += 1
        if self.reads <= self.failures:
            raise RemoteReadError(f"ISeq 0x{addr:x}: its name's objects moved while they were read")
        return dict(NAME)


class Writer:
    def __init__(self):
        self.iseqs = []

    def iseq(self, addr, at_ns, source, **info):
        self.iseqs.append((addr, at_ns, source, info))


def drainer_over(remote: Remote) -> Drainer:
    registry = SimpleNamespace(layout={}, span_head=lambda: 0, span_count=0)
    target = SimpleNamespace(registry=registry, info={"created_mono_ns": 0})
    sampler = SimpleNamespace(read_memory=None, forget_names=lambda iseqs, mes: None)
    d = Drainer(target, sampler, Writer())
    d.remote = remote
    return d


def test_a_read_spoiled_by_a_compaction_is_read_again_and_names_the_sample_from_its_own_window():
    # GIVEN a sample that showed the ISeq at A first, copied from lo on, whose first read fails
    d = drainer_over(Remote(failures=1))
    lo = 123_456_789
    d.to_read.append((A, lo, INSTRUCTIONS))
    # WHEN the Drainer names it at one drain, then at the next
    d.name_remotely()
    written_first = list(d.writer.iseqs)
    d.name_remotely()
    # THEN nothing is written at the first (no (unknown) for the samples until the next drain), and
    # the second writes its name from the sample's window, counting no error and no unnamed ISeq
    assert written_first == []
    assert d.writer.iseqs == [(A, lo, "remote", NAME)]
    assert (d.symbol_errors, d.unnamed_iseqs, d.read_again) == (0, 0, [])


def test_a_read_that_fails_for_longer_than_the_allowance_is_written_unknown_and_counted(monkeypatch):
    # GIVEN an ISeq whose reads always fail, and a read-again allowance of 1 ms
    monkeypatch.setattr(drainer, "READ_AGAIN_NS", 1_000_000)
    d = drainer_over(Remote(failures=10**9))
    d.to_read.append((A, 5, INSTRUCTIONS))
    d.name_remotely()
    assert d.writer.iseqs == []
    # WHEN it is read again after the allowance
    time.sleep(0.002)
    d.name_remotely()
    # THEN it is written (unknown) from the sample's window, counted as an error and an unnamed ISeq
    assert d.writer.iseqs == [(A, 5, "remote", UNKNOWN_ISEQ)]
    assert (d.symbol_errors, d.unnamed_iseqs, d.read_again) == (1, 1, [])


def test_an_iseq_replaced_at_the_address_is_written_unknown_at_once():
    # GIVEN a sample that saw other instructions at A than the ISeq there now runs
    d = drainer_over(Remote(failures=0, instructions=INSTRUCTIONS + 0x40))
    d.to_read.append((A, 7, INSTRUCTIONS))
    # WHEN it is named
    d.name_remotely()
    # THEN no read again: the sample's ISeq is gone, its frame (unknown)
    assert d.writer.iseqs == [(A, 7, "remote", UNKNOWN_ISEQ)]
    assert (d.unnamed_iseqs, d.read_again) == (1, [])


def test_the_last_read_of_a_recording_is_final():
    # GIVEN a read that failed and waits for the next drain
    d = drainer_over(Remote(failures=2))
    d.to_read.append((A, 9, INSTRUCTIONS))
    d.name_remotely()
    # WHEN the recording (or its file) ends: the last read, which fails too
    d.name_remotely(final=True)
    # THEN the ISeq is written (unknown) now, nothing is left to read
    assert d.writer.iseqs == [(A, 9, "remote", UNKNOWN_ISEQ)]
    assert d.read_again == []


def test_an_iseq_sampled_again_while_its_read_waits_is_read_once_a_drain_and_named_for_both_windows():
    # GIVEN an ISeq whose first read failed, shown again by a later sample (the sampler names every ISeq
    # anew at each drain during an eBPF pause) while its read waits
    d = drainer_over(Remote(failures=1))
    d.to_read.append((A, 10, INSTRUCTIONS))
    d.name_remotely()
    d.to_read.append((A, 20, INSTRUCTIONS))
    # WHEN the next drain names them
    d.name_remotely()
    # THEN one read names both samples' ISeq, each from its own window
    assert d.remote.reads == 2
    assert d.writer.iseqs == [(A, 10, "remote", NAME), (A, 20, "remote", NAME)]


class SweptRemote(Remote):
    """The target after the sample: a sweep started since, and, while it is in progress, the ISeq at A
    (dead, on a page not swept yet) reads whole with its path's slot holding another String."""

    def iseq_info(self, addr):
        self.reads += 1
        return dict(NAME, path="1299", realpath="1299") if self.sweeping else dict(NAME)


def a_sample_then_a_sweep_in_progress():
    """A Drainer to name the ISeq at A, sampled at lo; since then a sweep started and is in progress."""
    d = drainer_over(SweptRemote(failures=0))
    d.note_sweeps()
    lo = drainer._sampler.monotonic_ns()
    d.remote.sweeps, d.remote.sweeping = 1, True
    d.to_read.append((A, lo, INSTRUCTIONS))
    return d, lo


def test_a_read_while_a_sweep_started_since_the_sample_is_in_progress_is_read_again_after_it():
    # GIVEN a sample that showed the ISeq at A, then a sweep that started since and is in progress
    d, lo = a_sample_then_a_sweep_in_progress()
    # WHEN the Drainer reads it, and again at the next drain once the sweep has ended
    d.name_remotely()
    written_first = list(d.writer.iseqs)
    d.remote.sweeping = False
    d.name_remotely()
    # THEN the first read names nothing (no "1299"), counted; the second names it from the sample's window
    assert written_first == [] and d.sweep_reads == 1
    assert d.writer.iseqs == [(A, lo, "remote", NAME)]
    assert (d.symbol_errors, d.unnamed_iseqs) == (0, 0)


def test_a_read_in_a_sweep_that_never_ends_before_the_read_again_allowance_is_unknown():
    # GIVEN the same, the sweep still in progress at the last read (the recording ends)
    d, lo = a_sample_then_a_sweep_in_progress()
    d.name_remotely()
    d.name_remotely(final=True)
    # THEN the ISeq is (unknown), counted, its record saying why: never the String in its path's slot
    assert d.writer.iseqs == [(A, lo, "remote", {**UNKNOWN_ISEQ, "refused": "sweep"})]
    assert (d.unnamed_iseqs, d.sweep_reads) == (1, 2)


def test_a_read_refused_in_a_sweep_then_the_target_gone_is_unknown_saying_sweep():
    # GIVEN a read refused because a sweep started since the sample is in progress
    d, lo = a_sample_then_a_sweep_in_progress()
    d.name_remotely()
    # WHEN the target exits before the next drain: its last read reads nothing
    def gone(addr):
        raise RemoteReadError(f"ISeq 0x{addr:x}: process gone")
    d.remote.iseq_info = gone
    d.name_remotely(final=True)
    # THEN the ISeq is (unknown), its record saying the last read that read anything was refused for
    # the sweep (the read that failed outright is a symbol error too)
    assert d.writer.iseqs == [(A, lo, "remote", {**UNKNOWN_ISEQ, "refused": "sweep"})]
    assert (d.unnamed_iseqs, d.sweep_reads, d.symbol_errors) == (1, 1, 1)


def test_a_sweep_in_progress_since_before_the_sample_does_not_stop_the_read():
    # GIVEN an app idle in the middle of a lazy sweep (it allocates nothing, so the sweep does not
    # go on): the sweep started before the sample, and none since
    d = drainer_over(Remote(failures=0))
    d.remote.sweeps, d.remote.sweeping = 1, True
    d.note_sweeps()
    lo = drainer._sampler.monotonic_ns()
    d.to_read.append((A, lo, INSTRUCTIONS))
    # WHEN the Drainer reads it
    d.name_remotely()
    # THEN it is named at once: what was alive at the sample is freed only by a sweep started after it
    assert d.writer.iseqs == [(A, lo, "remote", NAME)] and d.sweep_reads == 0


def paused_ebpf():
    """eBPF's view of a target whose creation probes were attached before the samples and paused
    (the governor) before the reads: births in between are not seen."""
    return SimpleNamespace(attached_ns=0, paused=True, attached_throughout=lambda a, b: False,
                           sync=lambda: None, take=lambda: [])


@pytest.mark.parametrize("sweep_since", [True, False])
def test_a_read_across_an_ebpf_pause_is_taken_only_if_no_sweep_started_since_the_sample(sweep_since):
    # GIVEN a sample of the ISeq at A while the probes were attached, then a pause; and, when
    # sweep_since, a sweep that started and ended before the read: it may have freed the sample's
    # ISeq and let another be born at A unseen on the same instructions' buffer, reading whole
    d = drainer_over(Remote(failures=0))
    d.ebpf = paused_ebpf()
    d.note_sweeps()
    lo = drainer._sampler.monotonic_ns()
    if sweep_since:
        d.remote.sweeps += 1
    d.to_read.append((A, lo, INSTRUCTIONS))
    # WHEN the Drainer names it
    d.name_remotely()
    # THEN after such a sweep the ISeq is (unknown) and counted, never the name read; without one the
    # read is taken, counted as unproven
    if sweep_since:
        assert d.writer.iseqs == [(A, lo, "remote", {**UNKNOWN_ISEQ, "refused": "sweep"})]
        assert (d.unnamed_iseqs, d.sweep_reads, d.unproven) == (1, 1, 0)
    else:
        assert d.writer.iseqs == [(A, lo, "remote", NAME)]
        assert (d.unnamed_iseqs, d.sweep_reads, d.unproven) == (0, 0, 1)
