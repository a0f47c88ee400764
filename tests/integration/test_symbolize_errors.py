"""`sdb-symbolize` on damaged or wrong input: one line on stderr, a distinct exit code, and
everything recorded before the damage still written out."""
from __future__ import annotations

import msgpack
import pytest

from conftest import assert_one_error_line, record_program, run_symbolize
from sdb_trace import VERSION, TraceWriter, plain_bytes

NO_TRACE, NEWER, TRUNCATED, CORRUPT, OUTPUT = 20, 21, 22, 23, 24


@pytest.fixture(scope="module")
def real_trace(tmp_path_factory):
    """A 2.5 s recording of parked.rb (a batch every 0.5 s): its bytes (its records as plain msgpack)
    and its records' (start, end, type) spans."""
    path = record_program(tmp_path_factory.mktemp("symbolize"), "parked.rb", duration_s=2.5)
    data = plain_bytes(str(path))
    path.write_bytes(data)
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, max_buffer_size=0)
    unpacker.feed(data)
    spans = []
    while True:
        start = unpacker.tell()
        try:
            rec = unpacker.unpack()
        except msgpack.OutOfData:
            break
        spans.append((start, unpacker.tell(), rec["t"], len(rec.get("stack", ()))))
    assert spans and spans[-1][1] == len(data)
    assert sum(1 for s in spans if s[2] == "samples") >= 4, "want several samples records to cut between"
    return {"path": path, "data": data, "spans": spans}


def symbolize_to(tmp_path, name: str, data: bytes):
    """Writes `data` as a trace, symbolizes it with -o; (result, output text or None, samples in output)."""
    trace = tmp_path / f"{name}.msgpack"
    trace.write_bytes(data)
    out = tmp_path / f"{name}.collapsed"
    result = run_symbolize(str(trace), "--format", "collapsed", "-o", str(out))
    text = out.read_text() if out.exists() else None
    total = sum(int(line.rsplit(" ", 1)[1]) for line in (text or "").splitlines() if line.strip())
    return result, text, total


def samples_before(spans, offset: int) -> int:
    return sum(n for start, end, t, n in spans if t == "samples" and end <= offset)


def inside_value(data: bytes, span, key: bytes, into: int) -> int:
    """An offset `into` bytes inside the value of `key` in the record `span`: a cut inside one
    msgpack scalar (a uint64 or a string), where the reader must see a record cut in half."""
    start, end = span[0], span[1]
    packed_key = msgpack.packb(key.decode())
    at = data.index(packed_key, start, end) + len(packed_key)
    assert at + into < end
    return at + into


def cut_points(data: bytes, spans):
    """Byte offsets inside records, by name."""
    samples = [s for s in spans if s[2] == "samples"]
    middle = samples[len(samples) // 2]
    end = spans[-1]
    assert end[2] == "end"
    thread = next(s for s in spans if s[2] == "thread")
    return {
        # inside one scalar: deterministic whatever the recording holds
        "inside-base_ns-of-first-samples": inside_value(data, samples[0], b"base_ns", 4),
        "inside-base_ns-of-middle-samples": inside_value(data, middle, b"base_ns", 4),
        "inside-thread-name-string": inside_value(data, thread, b"name", 2),
        "inside-end-reason-string": inside_value(data, end, b"reason", 3),
        # right after a complete msgpack object inside a record (msgpack's tell() has moved past it)
        "one-byte-into-a-samples-record": middle[0] + 1,
        "last-byte-of-a-samples-record-missing": middle[1] - 1,
    }


CUTS = ["inside-base_ns-of-first-samples", "inside-base_ns-of-middle-samples", "inside-thread-name-string",
        "inside-end-reason-string",
        "one-byte-into-a-samples-record", "last-byte-of-a-samples-record-missing"]


def test_complete_trace_symbolizes_with_exit_0_and_no_stderr(real_trace, tmp_path):
    result, text, total = symbolize_to(tmp_path, "whole", real_trace["data"])
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert total == samples_before(real_trace["spans"], len(real_trace["data"])) > 0
    assert "park_here" in text


@pytest.mark.parametrize("cut", CUTS)
def test_truncated_trace_exits_22_with_one_line_and_keeps_samples_before_the_cut(real_trace, tmp_path, cut):
    # GIVEN a trace cut inside a record
    data, spans = real_trace["data"], real_trace["spans"]
    offset = cut_points(data, spans)[cut]
    record_start = max(start for start, end, t, n in spans if start < offset)
    assert offset not in {s[0] for s in spans}, "the cut must fall inside a record"
    # WHEN symbolized
    result, text, total = symbolize_to(tmp_path, "cut", data[:offset])
    # THEN exit 22, one line, naming the byte where the broken record starts
    assert result.returncode == TRUNCATED, result.stderr
    line = assert_one_error_line(result, "sdb-symbolize")
    assert f"truncated at byte {record_start}" in line, line
    # AND the output has every sample of the records before the cut...
    assert text is not None, "no output file written"
    assert total == samples_before(spans, offset)
    # ...exactly as the same trace cut cleanly at that record's start reads (exit 0, "cut short")
    clean, clean_text, _ = symbolize_to(tmp_path, "clean", data[:record_start])
    assert clean.returncode == 0, clean.stderr
    assert "cut short" in clean.stderr
    assert text == clean_text
    if total:
        assert "park_here" in text


@pytest.mark.parametrize("where", [
    "inside-the-magic-string",
    "right-after-the-header-map-byte",
])
def test_trace_cut_inside_its_header_exits_22(real_trace, tmp_path, where):
    data = real_trace["data"]
    offset = inside_value(data, real_trace["spans"][0], b"magic", 4) if where == "inside-the-magic-string" else 1
    result, text, total = symbolize_to(tmp_path, "header-cut", data[:offset])
    assert result.returncode == TRUNCATED, result.stderr
    line = assert_one_error_line(result, "sdb-symbolize")
    assert "truncated at byte 0" in line, line


def middle_boundary(spans) -> int:
    samples = [s for s in spans if s[2] == "samples"]
    return samples[len(samples) // 2][0]


def test_integer_where_a_record_is_expected_is_corrupt_exit_23(real_trace, tmp_path):
    # GIVEN a msgpack integer inserted between two records in the middle of the trace
    data, spans = real_trace["data"], real_trace["spans"]
    at = middle_boundary(spans)
    result, text, total = symbolize_to(tmp_path, "int", data[:at] + msgpack.packb(42) + data[at:])
    assert result.returncode == CORRUPT, result.stderr
    line = assert_one_error_line(result, "sdb-symbolize")
    assert f"corrupt at byte {at}" in line, line
    # THEN the samples before it are still written
    assert total == samples_before(spans, at) > 0


def test_garbage_bytes_replacing_a_record_are_corrupt_exit_23(real_trace, tmp_path):
    # GIVEN a record in the middle overwritten with 0xc1, a byte msgpack never uses
    data, spans = real_trace["data"], real_trace["spans"]
    at = middle_boundary(spans)
    end = next(e for s, e, t, n in spans if s == at)
    result, text, total = symbolize_to(tmp_path, "garbage", data[:at] + b"\xc1" * (end - at) + data[end:])
    assert result.returncode == CORRUPT, result.stderr
    line = assert_one_error_line(result, "sdb-symbolize")
    assert f"corrupt at byte {at}" in line, line
    assert total == samples_before(spans, at) > 0


def test_text_file_is_not_a_trace_exit_20(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("this is not a trace\nat all\n")
    result = run_symbolize(str(path))
    assert result.returncode == NO_TRACE, result.stderr
    line = assert_one_error_line(result, "sdb-symbolize")
    assert "not an sdb trace" in line
    assert result.stdout == ""


def test_empty_file_is_not_a_trace_exit_20(tmp_path):
    path = tmp_path / "empty.msgpack"
    path.write_bytes(b"")
    result = run_symbolize(str(path))
    assert result.returncode == NO_TRACE, result.stderr
    assert_one_error_line(result, "sdb-symbolize")


def test_missing_file_exits_20(tmp_path):
    result = run_symbolize(str(tmp_path / "no-such.msgpack"))
    assert result.returncode == NO_TRACE, result.stderr
    line = assert_one_error_line(result, "sdb-symbolize")
    assert "no-such.msgpack" in line


def write_small_trace(path, header_extra=None):
    with open(path, "wb") as f:
        w = TraceWriter(f, {"pid": 1, "ruby": "3.1.2", "rate_hz": 1000, "start_mono_ns": 0, "start_wall_ns": 0,
                            "max_depth": 10, **(header_extra or {})}, compress=False)
        w.thread(1, 101, "t1", 0, 0, 0)
        w.iseq(0x1000, "foo", "foo", "a.rb", None, 1, 1, 0)
        w.frames(0, [0], [0x1000], [0x1008], [0], [3])
        w.stacks(0, [[0]])
        w.samples(100, [0, 1], [1, 1], [0, 0], [0, 0])
        w.end(ticks=2, samples=2, torn=0, reason="duration")


def test_newer_format_version_exits_21_and_says_upgrade(tmp_path):
    # GIVEN a trace written by TraceWriter whose header is patched to version 99
    path = tmp_path / "t.msgpack"
    write_small_trace(path)
    data = path.read_bytes()
    unpacker = msgpack.Unpacker(raw=False)
    unpacker.feed(data)
    header = unpacker.unpack()
    rest = data[unpacker.tell():]
    assert header["version"] == VERSION
    header["version"] = 99
    path.write_bytes(msgpack.packb(header) + rest)
    result = run_symbolize(str(path))
    assert result.returncode == NEWER, result.stderr
    line = assert_one_error_line(result, "sdb-symbolize")
    assert "99" in line and "upgrade" in line


def test_unwritable_output_path_exits_24(tmp_path):
    path = tmp_path / "t.msgpack"
    write_small_trace(path)
    result = run_symbolize(str(path), "-o", "/nonexistent/dir/out.collapsed")
    assert result.returncode == OUTPUT, result.stderr
    line = assert_one_error_line(result, "sdb-symbolize")
    assert "/nonexistent/dir/out.collapsed" in line


def test_small_trace_symbolizes_to_the_expected_collapsed_line(tmp_path):
    path = tmp_path / "t.msgpack"
    write_small_trace(path)
    result = run_symbolize(str(path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["thread t1 (tid 101);foo (a.rb:3) 2"]


# ---------------------------------------------------------------- ids referring to undefined ids
def write_trace_with(path, stacks, sample_stacks, samples_record=None):
    with open(path, "wb") as f:
        w = TraceWriter(f, {"pid": 1, "ruby": "3.1.2", "rate_hz": 1000, "start_mono_ns": 0, "start_wall_ns": 0,
                            "max_depth": 10}, compress=False)
        w.thread(1, 101, "t1", 0, 0, 0)
        w.iseq(0x1000, "foo", "foo", "a.rb", None, 1, 1, 0)
        w.frames(0, [0], [0x1000], [0x1008], [0], [3])
        w.stacks(0, stacks)
        if samples_record is not None:
            f.write(msgpack.packb(samples_record))
        else:
            w.samples(100, [0] * len(sample_stacks), [1] * len(sample_stacks), sample_stacks, [0] * len(sample_stacks))
        w.end(ticks=2, samples=2, torn=0, reason="duration")


def test_stack_naming_an_undefined_frame_is_corrupt_exit_23(tmp_path):
    path = tmp_path / "t.msgpack"
    write_trace_with(path, stacks=[[0, 5]], sample_stacks=[0, 0])
    result = run_symbolize(str(path))
    assert result.returncode == CORRUPT, result.stderr
    assert_one_error_line(result, "sdb-symbolize")


def test_samples_naming_an_undefined_stack_are_corrupt_exit_23(tmp_path):
    path = tmp_path / "t.msgpack"
    write_trace_with(path, stacks=[[0]], sample_stacks=[0, 7])
    result = run_symbolize(str(path))
    assert result.returncode == CORRUPT, result.stderr
    assert_one_error_line(result, "sdb-symbolize")


def test_samples_record_missing_a_column_is_corrupt_exit_23(tmp_path):
    path = tmp_path / "t.msgpack"
    write_trace_with(path, stacks=[[0]], sample_stacks=[],
                     samples_record={"t": "samples", "base_ns": 0, "dt_ns": [0], "thread": [1], "stack": [0]})
    result = run_symbolize(str(path))
    assert result.returncode == CORRUPT, result.stderr
    assert_one_error_line(result, "sdb-symbolize")
