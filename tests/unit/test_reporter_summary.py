"""summary and summary-by-line: stackprof-like tables, self and total samples with their share,
most self time first; self adds up to every sample, total counts a function once per sample."""
from __future__ import annotations

import re

import pytest

from format_recording import formats_trace, symbolize

pytestmark = pytest.mark.once
ROW = re.compile(r"^\s*(\d+)\s+([\d.]+)%\s+(\d+)\s+([\d.]+)%\s+(.*)$")


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    return formats_trace(tmp_path_factory)


def table(text):
    lines = text.splitlines()
    n = int(re.match(r"sdb summary: ([\d,]+) samples", lines[0]).group(1).replace(",", ""))
    assert lines[1].split()[:4] == ["TOTAL", "(pct)", "SAMPLES", "(pct)"]
    rows = [ROW.match(l).groups() for l in lines[2:]]
    return n, [(int(t), float(tp), int(s), float(sp), what) for t, tp, s, sp, what in rows]


@pytest.mark.parametrize("fmt", ["summary", "summary-by-line"])
def test_self_and_total_with_percentages(recording, fmt):
    path, trace = recording
    n, rows = table(symbolize(path, fmt, "--idle").stdout.decode())
    assert n == len(trace.samples)
    assert sum(r[2] for r in rows) == n                        # one leaf per sample
    assert [r[2] for r in rows] == sorted((r[2] for r in rows), reverse=True)
    for total, tp, own, sp, _ in rows:
        assert own <= total <= n
        assert abs(tp - 100.0 * total / n) < 0.006 and abs(sp - 100.0 * own / n) < 0.006
    loop = next(r for r in rows if "format_crunch_loop" in r[4])
    step = [r for r in rows if "format_crunch_step" in r[4]]
    cruncher = sum(1 for s in trace.samples if s[1] == trace.serial_named("format_cruncher"))
    assert loop[0] == cruncher if fmt == "summary" else loop[0] <= cruncher
    assert sum(r[2] for r in step) <= cruncher and step


def test_by_line_names_the_line(recording):
    path, _ = recording
    _, rows = table(symbolize(path, "summary-by-line", "--idle").stdout.decode())
    step = [r[4] for r in rows if "format_crunch_step" in r[4]]
    assert step and all(re.match(r".*formats\.rb:\d+ ", w) for w in step)


def test_a_c_function_called_from_two_files_is_one_row_and_the_achieved_rate_is_stated(tmp_path):
    # GIVEN a trace where Array#join (a C function, located at its caller) is called from a.rb and b.rb,
    # recorded at an asked 1000 Hz that achieved 500 Hz (500 ticks in 1 s)
    from sdb_trace import TraceWriter
    path = tmp_path / "t.msgpack"
    with open(path, "wb") as f:
        w = TraceWriter(f, {"pid": 1, "rate_hz": 1000, "start_mono_ns": 0, "ruby": "3.1.7"})
        for addr, file in ((0x100, "/app/a.rb"), (0x200, "/app/b.rb")):
            w.iseq(addr, "<main>", "<main>", file, file, 1, 0, at_ns=0)
        w.method(0x900, at_ns=0, name="join", type=1, class_path="Array", singleton=False)
        w.frames(0, [0, 0, 1], [0x100, 0x200, 0], [0x1008, 0x2008, 0], [0, 0, 0x900], [3, 7, 0])
        w.stacks(0, [[2, 0], [2, 1]])      # innermost first: join called from a.rb, from b.rb
        w.samples(10, [0, 1, 2, 3], [1, 1, 1, 1], [0, 0, 1, 1], [1, 1, 1, 1])
        w.end(at_ns=1_000_000_000, ticks=500, samples=4)
    # WHEN it is summarized
    out = symbolize(path, "summary").stdout.decode()
    # THEN Array#join is one row with all four samples, and the header gives both rates
    n, rows = table(out)
    joins = [r for r in rows if r[4].startswith("Array#join")]
    assert len(joins) == 1 and joins[0][2] == 4, rows
    assert "asked 1000 Hz, achieved 500 Hz" in out.splitlines()[0]
