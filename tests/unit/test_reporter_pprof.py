"""pprof: a gzipped perftools.profiles.Profile that parses back with the protobuf classes built
from profile.proto; its totals equal the trace's; labels say thread id, name, state and pid."""
from __future__ import annotations

import gzip

import pytest

from format_recording import formats_trace, symbolize
from sdb_symbolize.pprof import Profile

pytestmark = pytest.mark.once


@pytest.fixture(scope="module")
def prof(tmp_path_factory):
    path, trace = formats_trace(tmp_path_factory)
    p = Profile()
    p.ParseFromString(gzip.decompress(symbolize(path, "pprof", "--idle").stdout))
    return p, trace


def test_values_are_samples_wall_and_cpu_nanoseconds_and_totals_match_the_trace(prof):
    p, trace = prof
    st = p.string_table
    assert st[0] == ""
    assert [(st[v.type], st[v.unit]) for v in p.sample_type] == [("samples", "count"), ("wall", "nanoseconds"),
                                                                 ("cpu", "nanoseconds")]
    assert st[p.default_sample_type] == "wall"
    period = int(round(1e9 / trace.header["rate_hz"]))
    assert (st[p.period_type.type], st[p.period_type.unit], p.period) == ("wall", "nanoseconds", period)
    assert sum(s.value[0] for s in p.sample) == len(trace.samples)
    assert sum(s.value[1] for s in p.sample) == len(trace.samples) * period
    running = sum(1 for s in trace.samples if s[3] == 1)
    assert running and sum(s.value[2] for s in p.sample) == running * period
    assert p.time_nanos == trace.header["start_wall_ns"]
    assert p.duration_nanos == trace.end["at_ns"] - trace.header["start_mono_ns"]


def test_labels_name_thread_id_name_state_and_pid(prof):
    p, trace = prof
    st = p.string_table
    tids = {th["tid"]: th["name"] for th in trace.threads.values()}
    per_state = {}
    for s in p.sample:
        labels = {st[l.key]: (st[l.str] if l.str else l.num) for l in s.label}
        assert set(labels) == {"thread_id", "thread_name", "thread_state", "pid"}
        assert labels["pid"] == trace.header["pid"]
        assert tids[labels["thread_id"]] == labels["thread_name"]
        per_state[labels["thread_state"]] = per_state.get(labels["thread_state"], 0) + s.value[0]
    names = {0: "unknown", 1: "running", 2: "waiting for GVL", 3: "blocked"}
    want = {}
    for smp in trace.samples:
        want[names[smp[3]]] = want.get(names[smp[3]], 0) + 1
    assert per_state == want


def test_locations_are_leaf_first_and_refer_to_functions(prof):
    p, _ = prof
    st = p.string_table
    funcs = {f.id: f for f in p.function}
    locs = {l.id: l for l in p.location}
    assert all(f.id > 0 for f in p.function) and all(l.id > 0 for l in p.location)

    def name(lid):
        return st[funcs[locs[lid].line[0].function_id].name]

    seen = 0
    for s in p.sample:
        names = [name(i) for i in s.location_id]
        if any("format_crunch_step" in n for n in names):
            seen += 1
            step = next(i for i, n in enumerate(names) if "format_crunch_step" in n)
            loop = next(i for i, n in enumerate(names) if "format_crunch_loop" in n)
            assert step < loop, names
    assert seen
    step_fn = next(f for f in p.function if "format_crunch_step" in st[f.name])
    assert st[step_fn.filename].endswith("formats.rb")
