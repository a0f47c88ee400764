"""json: one JSON object per sample per line, in the trace's order, for scripts."""
from __future__ import annotations

import json

import pytest

from format_recording import formats_trace, symbolize, thread_labels

pytestmark = pytest.mark.once


def test_one_record_per_sample_with_time_thread_state_and_frames(tmp_path_factory):
    path, trace = formats_trace(tmp_path_factory)
    records = [json.loads(l) for l in symbolize(path, "json", "--idle").stdout.decode().splitlines()]
    assert len(records) == len(trace.samples)
    labels = thread_labels(trace)
    states = {0: "unknown", 1: "running", 2: "waiting for GVL", 3: "blocked"}
    start = trace.header["start_mono_ns"]
    for rec, (t, serial, _, state) in zip(records, trace.samples):
        assert rec["t_ns"] == t and abs(rec["t"] - (t - start) / 1e9) < 1e-6
        assert rec["thread"] == labels[serial] and rec["tid"] == trace.threads[serial]["tid"]
        assert rec["state"] == states[state]
        assert all(len(f) == 3 for f in rec["frames"])
    crunch = [r for r in records if r["thread_name"] == "format_cruncher"]
    leaf_names = {r["frames"][-1][0] for r in crunch}
    assert any("format_crunch" in n for n in leaf_names), leaf_names
