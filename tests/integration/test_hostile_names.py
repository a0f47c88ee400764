"""Names the profiled program chose never drive the operator's terminal: a real Ruby thread whose name
holds OSC (window title), SGR (colour) and BEL sequences, a method defined with define_method under
such a name and code eval'd under such a file name, recorded and printed by `snapshot`, and by
`sdb-symbolize` to stdout in the text formats; in collapsed, `;` and line breaks cannot split a line."""
from __future__ import annotations

import subprocess

import pytest

from conftest import SYMBOLIZE, run_sidecar
from sdb_trace import TraceReader

pytestmark = pytest.mark.once

EVIL = "\x1b]0;pwned\x07\x1b[31mred\x1b[0m\x07;semi\nline"
SHOWN = "\\x1b]0;pwned\\x07\\x1b[31mred\\x1b[0m\\x07"       # as printed: every control character visible


def assert_terminal_safe(text: str) -> None:
    bad = sorted({hex(ord(c)) for c in text if (ord(c) < 0x20 and c != "\n") or 0x7f <= ord(c) < 0xa0})
    assert not bad, f"control characters reached the output: {bad}"


@pytest.fixture
def hostile(ruby_target, tmp_path):
    target = ruby_target("hostile_names.rb")
    trace = tmp_path / "hostile.msgpack"
    result = run_sidecar("attach", "--pid", str(target.pid), "--no-ebpf", "-d", "1", "-o", str(trace), "--quiet")
    assert result.returncode == 0, result.stderr
    return target, trace


def test_the_trace_holds_the_hostile_names_as_the_program_set_them(hostile):
    _, trace = hostile
    with TraceReader(str(trace)) as r:
        recs = list(r.records())
    assert any(rec["t"] == "thread" and rec["name"] == "worker" + EVIL for rec in recs)
    assert any(rec["t"] == "method" and rec.get("name") == "spin" + EVIL for rec in recs)
    assert any(rec["t"] == "iseq" and rec.get("path") == f"evil{EVIL}.rb" for rec in recs)


def test_snapshot_text_shows_escape_sequences_escaped(hostile):
    target, _ = hostile
    result = run_sidecar("snapshot", "--pid", str(target.pid))
    assert result.returncode == 0, result.stderr
    assert_terminal_safe(result.stdout)
    assert f'Thread "worker{SHOWN};semi\\x0aline"' in result.stdout
    assert f"(evil{SHOWN};semi\\x0aline.rb:" in result.stdout


@pytest.mark.parametrize("fmt", ["collapsed", "summary", "summary-by-line", "json", "speedscope", "firefox"])
def test_symbolize_to_stdout_shows_escape_sequences_escaped(hostile, fmt):
    _, trace = hostile
    result = subprocess.run([*SYMBOLIZE, str(trace), "--format", fmt], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert_terminal_safe(result.stdout)
    assert_terminal_safe(result.stderr)
    if fmt == "collapsed":
        lines = result.stdout.splitlines()
        assert lines and all(line.rsplit(" ", 1)[1].isdigit() for line in lines)
        worker = [line for line in lines if line.startswith("thread worker")]
        # `;` inside a name would split a frame: it is written `,`
        assert worker and all(f"thread worker{SHOWN.replace(';', ',')},semi\\x0aline (tid" in line for line in worker)


def test_a_thread_filter_error_lists_the_hostile_name_escaped(hostile):
    _, trace = hostile
    result = subprocess.run([*SYMBOLIZE, str(trace), "--thread", "nope"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert_terminal_safe(result.stderr)
    assert f"worker{SHOWN}" in result.stderr
