"""collapsed: `thread;root;...;leaf count` lines, sorted, one per distinct stack and thread."""
from __future__ import annotations

import pytest

from format_recording import formats_trace, symbolize

pytestmark = pytest.mark.once


def test_lines_are_thread_then_frames_root_first(tmp_path_factory):
    path, trace = formats_trace(tmp_path_factory)
    lines = symbolize(path, "collapsed", "--idle").stdout.decode().splitlines()
    assert lines == sorted(lines) and len(set(l.rsplit(" ", 1)[0] for l in lines)) == len(lines)
    assert sum(int(l.rsplit(" ", 1)[1]) for l in lines) == len(trace.samples)
    crunch = [l.rsplit(" ", 1)[0].split(";") for l in lines if "format_crunch_step" in l]
    for frames in crunch:
        assert frames[0].startswith("thread format_cruncher")
        step = next(i for i, f in enumerate(frames) if "format_crunch_step" in f)
        assert any("format_crunch_loop" in f for f in frames[:step])
