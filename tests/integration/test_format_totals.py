"""Every output format on the same multi-threaded recording: the same samples per thread as the
trace holds, with and without idle samples; and the filters every format shares (--thread,
--from/--to, --no-idle, --no-lines) select the same samples in every format."""
from __future__ import annotations

import pytest

from format_recording import expected_per_thread, formats_trace, per_thread, symbolize, thread_labels
from sdb_symbolize.reporters import REPORTERS

pytestmark = pytest.mark.once

# the profiles; `endpoints` is a report per unit of work (every state, always), not a profile of
# frames: tests/integration/test_requests*.py check it
FORMATS = sorted(name for name, r in REPORTERS.items() if not getattr(r, "by_unit", False))


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    return formats_trace(tmp_path_factory)


def period(trace) -> int:
    return int(round(1e9 / trace.header["rate_hz"]))


def read(trace_path, trace, fmt, *args):
    r = symbolize(trace_path, fmt, *args)
    return per_thread(fmt, r.stdout, period(trace))


def as_format(fmt, expected):
    return {"*": sum(expected.values())} if fmt.startswith("summary") else expected


def test_the_recording_has_every_kind_of_thread(recording):
    _, trace = recording
    names = {th["name"] for th in trace.threads.values()}
    assert {"format_main", "format_cruncher", "format_mixer", "format_sleeper"} <= names
    states = {s[3] for s in trace.samples}
    assert 1 in states and 3 in states, states   # running and blocked samples both present


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("idle", [True, False], ids=["idle", "no-idle"])
def test_every_format_holds_every_sample_of_every_thread(recording, fmt, idle):
    trace_path, trace = recording
    got = read(trace_path, trace, fmt, "--idle" if idle else "--no-idle")
    assert got == as_format(fmt, expected_per_thread(trace, idle=idle))


@pytest.mark.parametrize("fmt", FORMATS)
def test_thread_filter_by_name_or_tid(recording, fmt):
    trace_path, trace = recording
    serial = trace.serial_named("format_cruncher")
    label = thread_labels(trace)[serial]
    want = as_format(fmt, {label: sum(1 for s in trace.samples if s[1] == serial)})
    assert read(trace_path, trace, fmt, "--idle", "--thread", "format_cruncher") == want
    tid = str(trace.threads[serial]["tid"])
    assert read(trace_path, trace, fmt, "--idle", "--thread", tid) == want


@pytest.mark.parametrize("fmt", FORMATS)
def test_time_window(recording, fmt):
    trace_path, trace = recording
    # --from/--to count from the header's start of recording; the window is 0.3-0.8 s after the first sample
    start = trace.header["start_mono_ns"]
    first = min(s[0] for s in trace.samples)
    from_s = round((first - start) / 1e9 + 0.3, 3)
    to_s = from_s + 0.5
    lo, hi = start + int(from_s * 1e9), start + int(to_s * 1e9)
    want = expected_per_thread(trace, keep=lambda s: lo <= s[0] <= hi)
    assert 0 < sum(want.values()) < len(trace.samples)
    got = read(trace_path, trace, fmt, "--idle", "--from", str(from_s), "--to", str(to_s))
    assert got == as_format(fmt, want)


def test_no_lines_merges_the_lines_of_a_function(recording):
    trace_path, trace = recording
    with_lines = symbolize(trace_path, "collapsed", "--idle").stdout.decode()
    no_lines = symbolize(trace_path, "collapsed", "--idle", "--no-lines").stdout.decode()
    assert "formats.rb:" in with_lines and "formats.rb:" not in no_lines
    assert "format_crunch_step (" in no_lines
    assert len(no_lines.splitlines()) < len(with_lines.splitlines())
    by_line = symbolize(trace_path, "summary-by-line", "--idle", "--no-lines").stdout.decode()
    assert ".rb:" not in by_line


def test_states_puts_the_thread_state_at_the_root(recording):
    trace_path, trace = recording
    text = symbolize(trace_path, "collapsed", "--idle", "--states").stdout.decode()
    roots = {line.split(";")[1] for line in text.splitlines()}
    assert "(running)" in roots and "(blocked)" in roots


@pytest.mark.parametrize("args, message", [
    (["--thread", "no_such_thread"], "no such thread"),
    (["--from", "2", "--to", "1"], "before --from"),
])
def test_a_filter_that_makes_no_sense_is_one_error_line(recording, args, message, tmp_path):
    trace_path, _ = recording
    out = tmp_path / "out.collapsed"
    r = symbolize(trace_path, "collapsed", *args, out=out, check=False)
    lines = [l for l in r.stderr.decode().splitlines() if l.strip()]
    assert r.returncode == 2 and len(lines) == 1 and message in lines[0], (r.returncode, lines)
    assert lines[0].startswith("sdb-symbolize: error:")
