"""The progress line of long symbolizations: only on a terminal, looks at the clock every N
updates, redraws at most 10 times a second, and erases itself when done."""
from __future__ import annotations

import io

import pytest

from sdb_symbolize import recorded, samples

pytestmark = pytest.mark.once


class Tty(io.StringIO):
    def isatty(self):
        return True


def test_throttled_and_erased(monkeypatch):
    now = [100.0]
    clock_reads = [0]

    def monotonic():
        clock_reads[0] += 1
        return now[0]

    monkeypatch.setattr(recorded.time, "monotonic", monotonic)
    out = Tty()
    p = samples.Progress(total=1000, stream=out, every=8, delay_s=0.5)
    reads_at_start = clock_reads[0]
    for _ in range(80):            # no time passes: nothing drawn, the clock read 10 times
        p.update(1)
    assert out.getvalue() == "" and clock_reads[0] - reads_at_start == 10
    now[0] += 0.6
    for _ in range(80):            # 0.6 s later: drawn once, then not again within 0.1 s
        p.update(1)
    assert out.getvalue().count("\r") == 1 and "8.8% (88 of 1,000 samples" in out.getvalue()
    now[0] += 0.2
    for _ in range(8):
        p.update(1)
    assert out.getvalue().count("\r") == 2
    p.finish()
    assert out.getvalue().endswith("\r\x1b[K")


def test_silent_when_not_a_terminal():
    out = io.StringIO()
    p = samples.Progress(total=10, stream=out, every=1, delay_s=0)
    for _ in range(100):
        p.update(1)
    p.finish()
    assert out.getvalue() == ""
