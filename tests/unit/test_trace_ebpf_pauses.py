"""The eBPF governor's pause records in a trace: read into Tables.ebpf_pauses; traces without them
(older ones) read as before."""
from __future__ import annotations

import pytest

from sdb_trace import TraceWriter, load_tables

pytestmark = pytest.mark.once


def write(path, with_pauses: bool, resumed: bool = True) -> None:
    with open(path, "wb") as f:
        w = TraceWriter(f, {"pid": 1, "rate_hz": 1000, "start_mono_ns": 0})
        w.iseq(0x1000, "foo", "foo", "/a.rb", None, 1, 1, at_ns=10, source="ebpf")
        if with_pauses:
            w.ebpf_pause(100, rate=40000, backoff_s=0.5)
            w.ebpf_resume(600)
            w.ebpf_pause(700, rate=50000, backoff_s=1.0)
            if resumed:
                w.ebpf_resume(1700)
        w.iseq(0x1000, "bar", "bar", "/a.rb", None, 3, 1, at_ns=650, source="remote")
        w.end(at_ns=2000, reason="duration", ebpf={"pauses": 2 if with_pauses else 0})


def test_pauses_are_read_with_their_ends(tmp_path):
    # GIVEN a trace with two pauses, WHEN its tables are loaded
    write(tmp_path / "t.msgpack", with_pauses=True)
    t = load_tables(str(tmp_path / "t.msgpack"))
    # THEN both pauses are there with their times
    assert t.ebpf_pauses == [[100, 600], [700, 1700]] and t.error is None


def test_an_iseq_name_written_before_a_pause_does_not_hold_after_its_start(tmp_path):
    # GIVEN foo named by eBPF at 10, a pause from 100 to 600 and from 700, bar read remotely at 650
    write(tmp_path / "t.msgpack", with_pauses=True)
    t = load_tables(str(tmp_path / "t.msgpack"))
    # THEN foo holds until the first pause starts: births went unseen from then on, and an ISeq born
    # at its address could have taken its instruction buffer too (a wrong name, not a missing one)
    assert t.symbol_at(t.iseqs, 0x1000, 99).label == "foo"
    assert t.symbol_at(t.iseqs, 0x1000, 100) is None and t.symbol_at(t.iseqs, 0x1000, 640) is None
    # AND bar, written after that start, holds until the next pause starts
    assert t.symbol_at(t.iseqs, 0x1000, 650).label == "bar" and t.symbol_at(t.iseqs, 0x1000, 699).label == "bar"
    assert t.symbol_at(t.iseqs, 0x1000, 700) is None and t.symbol_at(t.iseqs, 0x1000, 1800) is None


def test_a_pause_still_running_at_the_end_has_no_end(tmp_path):
    write(tmp_path / "t.msgpack", with_pauses=True, resumed=False)
    assert load_tables(str(tmp_path / "t.msgpack")).ebpf_pauses == [[100, 600], [700, None]]


def test_a_trace_without_pause_records_reads_as_before(tmp_path):
    write(tmp_path / "t.msgpack", with_pauses=False)
    t = load_tables(str(tmp_path / "t.msgpack"))
    assert t.ebpf_pauses == [] and t.error is None and len(t.iseqs[0x1000]) == 2
