"""json: JSON Lines in the trace's order, for scripts: each distinct stack defined once, then one
object per sample naming its stack (or, with --json-frames, carrying its frames)."""
from __future__ import annotations

import json

import pytest

from format_recording import formats_trace, symbolize, thread_labels
from sdb_symbolize.reporters.json_lines import read_samples

pytestmark = pytest.mark.once


def test_one_record_per_sample_with_time_thread_state_and_frames(tmp_path_factory):
    path, trace = formats_trace(tmp_path_factory)
    records = list(read_samples(symbolize(path, "json", "--idle").stdout.decode().splitlines()))
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


def test_stacks_are_defined_once_and_inline_frames_only_when_asked(tmp_path_factory):
    path, trace = formats_trace(tmp_path_factory)
    lines = symbolize(path, "json", "--idle").stdout.decode().splitlines()
    stacks = [json.loads(l) for l in lines if '"t":' not in l[:6]]
    samples = [json.loads(l) for l in lines if l.startswith('{"t":')]
    # THEN each stack is on one line, before the samples that name it, and samples carry no frames
    ids = [s["stack"] for s in stacks]
    assert len(ids) == len(set(ids)) and len(stacks) + len(samples) == len(lines)
    assert all("frames" not in s and isinstance(s["stack"], int) for s in samples)
    seen = set()
    for line in lines:
        rec = json.loads(line)
        if "t" in rec:
            assert rec["stack"] in seen
        else:
            seen.add(rec["stack"])
    # AND --json-frames gives the same samples with their frames inline, no stack lines
    inline = [json.loads(l) for l in symbolize(path, "json", "--idle", "--json-frames").stdout.decode().splitlines()]
    assert all("frames" in r and "stack" not in r for r in inline)
    assert [r["frames"] for r in inline] == [r["frames"] for r in read_samples(lines)]
