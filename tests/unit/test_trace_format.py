"""sdb_trace, the one reader/writer of the trace format (docs/trace-format.md)."""
from __future__ import annotations

import io
import os

import msgpack
import pytest

from sdb_trace import (VERSION, KIND_CFUNC, KIND_RUBY, Corrupt, NewerVersion, NotATrace, TraceReader, TraceWriter,
                       Truncated, iter_samples, load_tables)

pytestmark = pytest.mark.once  # nothing here depends on the Ruby under test

HEADER = {"pid": 4242, "ruby": "3.1.2", "ruby_description": "ruby 3.1.2p20", "layout": "3.1", "rate_hz": 1000,
          "start_mono_ns": 1_000, "start_wall_ns": 1_700_000_000_000_000_000, "hostname": "h",
          "sdb_version": "0.1.0", "command": ["ruby", "app.rb"], "max_depth": 2048}


def write_small_trace(path, end: bool = True, compress: bool = False) -> bytes:
    """Two threads, three frames (one a C function), two stacks, two sample batches, an end. Plain
    msgpack records (the byte-level tests cut and damage them at record boundaries) unless `compress`
    (format 3: a zstd stream after the header, as the sidecar writes)."""
    buf = io.BytesIO()
    w = TraceWriter(buf, HEADER, compress=compress)
    w.thread(1, 4242, "main", 10, 3, 20)
    w.thread(2, 4243, "worker", 11, 0, 20)
    w.iseq(0x1000, "foo", "foo", "/app/a.rb", None, 1, 1, 20)
    w.iseq(0x2000, "<main>", "<main>", "/app/a.rb", None, 1, 0, 20)
    w.cfunc(0xbeef, "sleep", 20)
    w.frames(0, [KIND_RUBY, KIND_RUBY, KIND_CFUNC], [0x1000, 0x2000, 0], [0x1010, 0x2010, 0], [0, 0, 0xbeef],
             [3, 9, 0])
    w.stacks(0, [[0, 1], [2, 0, 1]])
    w.samples(1_000_000, [0, 0, 1_000_000], [1, 2, 1], [0, 1, 0], [1, 3, 1])
    w.thread(2, 4243, "worker-renamed", 11, 0, 2_500_000)
    w.samples(3_000_000, [0, 5], [1, 2], [1, 1], [0, 0])
    w.thread_end(2, 3_100_000)
    if end:
        w.end(at_ns=4_000_000, reason="duration", ticks=3, late=0, missed=0, samples=5, torn=0, retried=0,
              errors=0, threads=2, symbol_errors=0)
    data = buf.getvalue()
    with open(path, "wb") as f:
        f.write(data)
    return data


def record_boundaries(data: bytes) -> list:
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
    unpacker.feed(data)
    bounds = [0]
    for _ in unpacker:
        bounds.append(unpacker.tell())
    assert bounds[-1] == len(data)
    return bounds


class MemTrace:
    """A trace file in memory (memfd): rewritten thousands of times without touching the disk."""

    def __init__(self):
        self.fd = os.memfd_create("sdb-test-trace")
        self.path = f"/proc/self/fd/{self.fd}"

    def write(self, data: bytes) -> str:
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, data, 0)
        return self.path

    def close(self) -> None:
        os.close(self.fd)


@pytest.fixture
def mem_trace():
    m = MemTrace()
    yield m
    m.close()


def read_all(path) -> list:
    with TraceReader(str(path)) as r:
        return [r.header] + list(r.records())


def test_writer_reader_round_trip_keeps_every_record(tmp_path):
    path = tmp_path / "t.msgpack"
    write_small_trace(path)
    recs = read_all(path)
    assert [r["t"] for r in recs] == ["header", "thread", "thread", "iseq", "iseq", "cfunc", "frames", "stacks",
                                      "samples", "thread", "samples", "thread_end", "end"]
    header = recs[0]
    assert header["magic"] == "sdb-trace" and header["version"] == VERSION
    for k, v in HEADER.items():
        assert header[k] == v, k
    assert recs[6]["line"] == [3, 9, 0]
    assert recs[7]["stacks"] == [[0, 1], [2, 0, 1]]
    assert recs[-1]["reason"] == "duration" and recs[-1]["torn"] == 0


def test_reader_marks_a_trace_with_an_end_record_complete(tmp_path):
    path = tmp_path / "t.msgpack"
    write_small_trace(path)
    with TraceReader(str(path)) as r:
        list(r.records())
        assert r.complete and r.end["reason"] == "duration"
    cut = tmp_path / "cut.msgpack"
    write_small_trace(cut, end=False)
    with TraceReader(str(cut)) as r:
        list(r.records())
        assert not r.complete and r.end is None


def test_load_tables_and_iter_samples_give_threads_frames_stacks_and_samples(tmp_path):
    path = tmp_path / "t.msgpack"
    write_small_trace(path)
    t = load_tables(str(path))
    assert t.error is None
    assert t.sample_count == 5
    assert t.threads[1]["name"] == "main"
    assert t.threads[2]["name"] == "worker-renamed"
    assert t.threads[2]["names"] == ["worker", "worker-renamed"]
    assert t.threads[2]["end_ns"] == 3_100_000
    assert t.frame_kind == [KIND_RUBY, KIND_RUBY, KIND_CFUNC]
    assert t.frame_line == [3, 9, 0]
    assert [list(s) for s in t.stacks] == [[0, 1], [2, 0, 1]]   # arrays of frame ids
    assert t.symbol_at(t.iseqs, 0x1000, 0).label == "foo"
    assert t.symbol_at(t.cfuncs, 0xbeef, 0).label == "sleep"
    assert t.end["ticks"] == 3
    batches = []
    iter_samples(str(path), lambda *b: batches.append(b))
    assert batches == [(1_000_000, [0, 0, 1_000_000], [1, 2, 1], [0, 1, 0], [1, 3, 1]),
                       (3_000_000, [0, 5], [1, 2], [1, 1], [0, 0])]


def test_unknown_record_types_and_keys_are_skipped(tmp_path):
    path = tmp_path / "t.msgpack"
    data = write_small_trace(path, end=False)
    extra = msgpack.packb({"t": "from-the-future", "x": 1})
    end = msgpack.packb({"t": "end", "reason": "duration", "ticks": 3, "samples": 5, "torn": 0, "new_key": [1]})
    path.write_bytes(data + extra + end)
    t = load_tables(str(path))
    assert t.error is None
    assert t.sample_count == 5 and t.end["reason"] == "duration"


def test_empty_file_is_not_a_trace(tmp_path):
    path = tmp_path / "empty"
    path.write_bytes(b"")
    with pytest.raises(NotATrace):
        TraceReader(str(path))


def test_every_truncation_of_a_small_trace_reads_fine_or_raises_truncated(tmp_path, mem_trace):
    # GIVEN a small trace cut at every byte offset (the empty file aside)
    data = write_small_trace(tmp_path / "full.msgpack")
    bounds = set(record_boundaries(data))
    wrong = []
    for n in range(1, len(data)):
        path = mem_trace.write(data[:n])
        # WHEN it is read record by record
        try:
            with TraceReader(str(path)) as r:
                recs = list(r.records())
            outcome = "ok"
        except Truncated:
            outcome = "truncated"
        except Exception as e:  # noqa: BLE001 - recorded below: no other exception is allowed
            outcome = f"{type(e).__name__}: {e}"
        # THEN a cut at a record boundary reads fine (every record before it); anywhere else: Truncated
        expected = "ok" if n in bounds else "truncated"
        if outcome != expected:
            wrong.append((n, expected, outcome))
        elif outcome == "ok":
            assert 1 + len(recs) == sorted(bounds).index(n)
    assert not wrong, (f"{len(wrong)} of {len(data) - 1} cuts read wrongly, e.g. "
                       + "; ".join(f"cut at {n}: expected {e}, got {o}" for n, e, o in wrong[:6]))


def test_every_truncation_of_a_small_trace_never_raises_anything_but_truncated_or_not_a_trace(
        tmp_path, mem_trace):
    # the weaker promise: whatever the cut, the reader raises only its own errors, never e.g. a KeyError
    data = write_small_trace(tmp_path / "full.msgpack")
    for n in range(0, len(data)):
        path = mem_trace.write(data[:n])
        try:
            with TraceReader(str(path)) as r:
                list(r.records())
            load_tables(str(path))
        except (Truncated, NotATrace):
            pass


def test_every_truncation_of_a_compressed_trace_keeps_the_records_before_the_cut(tmp_path, mem_trace):
    # GIVEN a small trace written compressed (format 3), cut at every byte offset
    data = write_small_trace(tmp_path / "full.msgpack", compress=True)
    full = read_all(tmp_path / "full.msgpack")
    assert data[len(msgpack.packb(full[0])):][:4] == b"\x28\xb5\x2f\xfd", "not a zstd stream after the header"
    longest = 0
    for n in range(1, len(data)):
        path = mem_trace.write(data[:n])
        recs = []
        # WHEN it is read record by record
        try:
            with TraceReader(str(path)) as r:
                recs = [r.header]
                for rec in r.records():
                    recs.append(rec)
        except (Truncated, NotATrace):
            pass                                # the only errors a cut may give
        # THEN what it reads is the records before the cut, never one that was not written
        assert recs == full[:len(recs)], n
        longest = max(longest, len(recs))
    assert longest >= len(full) - 1             # a late cut still gives every record written before it


def test_a_damaged_byte_of_a_compressed_trace_is_corrupt_or_truncated_never_another_error(tmp_path, mem_trace):
    data = write_small_trace(tmp_path / "full.msgpack", compress=True)
    start = len(msgpack.packb(read_all(tmp_path / "full.msgpack")[0]))
    for at in range(start, len(data)):
        path = mem_trace.write(data[:at] + bytes([data[at] ^ 0x5a]) + data[at + 1:])
        try:
            with TraceReader(str(path)) as r:
                list(r.records())
            load_tables(str(path))
        except (Truncated, Corrupt):
            pass


def test_garbage_record_raises_corrupt_after_the_good_records(tmp_path):
    data = write_small_trace(tmp_path / "full.msgpack")
    bounds = record_boundaries(data)
    at = bounds[7]  # before the stacks record
    path = tmp_path / "bad.msgpack"
    path.write_bytes(data[:at] + msgpack.packb([1, 2, 3]) + data[at:])
    seen = []
    with pytest.raises(Corrupt, match=f"corrupt at byte {at}"):
        with TraceReader(str(path)) as r:
            for rec in r.records():
                seen.append(rec["t"])
    assert seen == ["thread", "thread", "iseq", "iseq", "cfunc", "frames"]
    t = load_tables(str(path))
    assert isinstance(t.error, Corrupt)
    assert len(t.frame_kind) == 3 and t.stacks == []


def test_invalid_msgpack_byte_raises_corrupt(tmp_path):
    data = write_small_trace(tmp_path / "full.msgpack")
    at = record_boundaries(data)[3]
    path = tmp_path / "bad.msgpack"
    path.write_bytes(data[:at] + b"\xc1" + data[at + 1:])
    with pytest.raises(Corrupt):
        with TraceReader(str(path)) as r:
            list(r.records())


def test_frames_record_with_a_wrong_first_id_is_corrupt(tmp_path):
    data = write_small_trace(tmp_path / "full.msgpack", end=False)
    path = tmp_path / "bad.msgpack"
    again = msgpack.packb({"t": "frames", "first_id": 0, "kind": [0], "iseq": [1], "pc": [1], "me": [0],
                           "line": [1]})
    path.write_bytes(data + again)
    t = load_tables(str(path))
    assert isinstance(t.error, Corrupt)


def test_text_file_is_not_a_trace(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello, I am text\n")
    with pytest.raises(NotATrace):
        TraceReader(str(path))


def test_msgpack_map_without_the_magic_is_not_a_trace(tmp_path):
    path = tmp_path / "other.msgpack"
    path.write_bytes(msgpack.packb({"t": "header", "magic": "something-else", "version": 1}))
    with pytest.raises(NotATrace):
        TraceReader(str(path))


def test_newer_version_raises_newer_version_with_upgrade_message(tmp_path):
    path = tmp_path / "t.msgpack"
    data = write_small_trace(path)
    unpacker = msgpack.Unpacker(raw=False)
    unpacker.feed(data)
    header = unpacker.unpack()
    header["version"] = 99
    path.write_bytes(msgpack.packb(header) + data[unpacker.tell():])
    with pytest.raises(NewerVersion, match=r"format 99.*upgrade"):
        TraceReader(str(path))
