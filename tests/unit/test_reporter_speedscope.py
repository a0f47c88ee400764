"""speedscope: the file format of https://www.speedscope.app/file-format-schema.json, one sampled
profile per thread, weights in nanoseconds (one tick period per sample), frames with file:line."""
from __future__ import annotations

import json

import pytest

from format_recording import expected_per_thread, formats_trace, symbolize

pytestmark = pytest.mark.once


@pytest.fixture(scope="module")
def doc(tmp_path_factory):
    path, trace = formats_trace(tmp_path_factory)
    return json.loads(symbolize(path, "speedscope", "--idle", "--sample-type", "wall").stdout), trace


def test_one_sampled_profile_per_thread_weighted_in_nanoseconds(doc):
    d, trace = doc
    assert d["$schema"] == "https://www.speedscope.app/file-format-schema.json"
    period = int(round(1e9 / trace.header["rate_hz"]))
    frames = d["shared"]["frames"]
    want = expected_per_thread(trace)
    assert {p["name"] for p in d["profiles"]} == set(want)
    for p in d["profiles"]:
        assert p["type"] == "sampled" and p["unit"] == "nanoseconds"
        assert len(p["samples"]) == len(p["weights"])
        assert p["startValue"] == 0 and p["endValue"] == sum(p["weights"]) == want[p["name"]] * period
        assert all(0 <= i < len(frames) for s in p["samples"] for i in s)
        # runs of one stack are merged: no two neighbours are the same stack
        assert all(a != b for a, b in zip(p["samples"], p["samples"][1:]))


def test_frames_carry_file_and_line_and_stacks_are_root_first(doc):
    d, _ = doc
    frames = d["shared"]["frames"]
    step = [i for i, f in enumerate(frames) if "format_crunch_step" in f["name"]]
    assert step and all(frames[i]["file"].endswith("formats.rb") and frames[i]["line"] > 0 for i in step)
    loop = {i for i, f in enumerate(frames) if "format_crunch_loop" in f["name"]}
    cruncher = next(p for p in d["profiles"] if "format_cruncher" in p["name"])
    for s in cruncher["samples"]:
        if set(step) & set(s):
            at_step = min(s.index(i) for i in step if i in s)
            assert any(s.index(i) < at_step for i in loop if i in s), "caller listed before callee"
