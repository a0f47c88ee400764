"""Requests and jobs in the timeline formats: the Firefox Profiler's markers (one per request, job
and label, on its thread's track, with its endpoint, id and status; the filters apply), and
speedscope's profiles per endpoint and per request (--by); other formats' root frame per request.
On a trace written by hand, so every expected value is known."""
from __future__ import annotations

import json

import pytest

from conftest import symbolized
from sdb_trace import KIND_RUBY, TraceWriter

pytestmark = pytest.mark.once

START = 1_000_000_000
MS = 1_000_000
HEADER = {"pid": 77, "ruby": "3.4.5", "ruby_description": "ruby 3.4.5", "layout": "3.4", "rate_hz": 2000,
          "start_mono_ns": START, "start_wall_ns": 1_700_000_000_000_000_000, "hostname": "h", "sdb_version": "0.1.0",
          "command": ["puma"], "max_depth": 2048}
T0, T1 = "thread puma srv 0 (tid 101)", "thread puma srv 1 (tid 102)"    # the tracks' names
EVIL = "Evil\x1b]0;owned\x07Controller#show"

# (what, span, parent, thread, at ms, kind, endpoint, status, request id); kind 1 request, 3 label
EVENTS = [
    (2, 5, 0, 2, 1, 0, "OldController#index", 200, "req-0"),  # began before the recording (begin lost)
    (1, 1, 0, 1, 1, 1, None, 0, None),
    (1, 2, 1, 1, 2, 3, "render", 0, None),
    (1, 3, 0, 2, 2, 1, None, 0, None),
    (2, 2, 1, 1, 3, 0, "render", 0, None),
    (2, 1, 0, 1, 5, 0, "ReportsController#show", 200, "req-a"),
    (1, 4, 0, 1, 6, 1, None, 0, None),                         # still running when the recording ends
    (2, 3, 0, 2, 8, 0, EVIL, 500, "req-b"),
]


def span_of(thread: int, t_ms: float) -> int:
    """The innermost span a sample of `thread` at `t_ms` is in."""
    if thread == 1:
        return 0 if t_ms < 1 else 1 if t_ms < 2 else 2 if t_ms < 3 else 1 if t_ms < 5 else 0 if t_ms < 6 else 4
    return 5 if t_ms < 1 else 3 if 2 <= t_ms < 8 else 0


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    """Two threads sampled every 0.5 ms for 10 ms, each sample in the span its thread was in."""
    path = tmp_path_factory.mktemp("units") / "units.msgpack"
    with open(path, "wb") as f:
        w = TraceWriter(f, HEADER)
        w.thread(1, 101, "puma srv 0", START, 1, START)
        w.thread(2, 102, "puma srv 1", START, 0, START)
        w.iseq(0x1000, "<main>", "<main>", "/app/app.rb", None, 1, 0, START)
        w.iseq(0x2000, "work", "work", "/app/app.rb", None, 3, 1, START)
        w.frames(0, [KIND_RUBY, KIND_RUBY], [0x1000, 0x2000], [0x1010, 0x2010], [0, 0], [9, 4])
        w.stacks(0, [[0, 1]])
        cols = list(zip(*EVENTS))
        w.spans(list(cols[0]), list(cols[1]), list(cols[2]), list(cols[3]), [START + ms * MS for ms in cols[4]],
                list(cols[5]), list(cols[6]), list(cols[7]), list(cols[8]))
        for th in (1, 2):
            ts = [i * 0.5 for i in range(20)]
            w.samples(START, [int(t * MS) for t in ts], [th] * 20, [0] * 20, [1] * 20,
                      span=[span_of(th, t) for t in ts], tick=list(range(1, 21)))
        w.end(at_ns=START + 10 * MS, reason="duration", ticks=20, late=0, missed=0, samples=40, torn=0,
              retried=0, errors=0, threads=2, symbol_errors=0)
    return path


def run(trace, fmt, *args) -> str:
    out = symbolized(trace, fmt, *args)
    assert b"\x1b" not in out and b"\x07" not in out, "a control character from the app reached the output"
    return out.decode()


def markers(profile: dict) -> dict:
    """{track name: [(marker name, start, end, phase, data)]}."""
    out = {}
    for th in profile["threads"]:
        m = th["markers"]
        assert all(len(m[c]) == m["length"] for c in ("data", "name", "startTime", "endTime", "phase", "category"))
        out[th["name"]] = [(th["stringArray"][n], s, e, p, d)
                           for n, s, e, p, d in zip(m["name"], m["startTime"], m["endTime"], m["phase"], m["data"])]
    return out


def test_firefox_marks_each_request_job_and_label_on_its_threads_track(trace):
    p = json.loads(run(trace, "firefox"))
    schema = {s["name"]: s for s in p["meta"]["markerSchema"]}
    cats = p["meta"]["categories"]
    seen = markers(p)
    t1 = {m[0]: m for m in seen[T0]}
    t2 = {m[0]: m for m in seen[T1]}
    assert set(t1) == {"ReportsController#show", "render", "(no endpoint)"}
    assert set(t2) == {"OldController#index", EVIL}
    # a whole request: an interval from its begin to its end (ms since the recording began)
    assert t1["ReportsController#show"][1:4] == (1.0, 5.0, 1)
    assert t1["ReportsController#show"][4] == {"type": "SdbUnit", "kind": "request",
                                               "endpoint": "ReportsController#show", "request_id": "req-a",
                                               "status": 200}
    assert t1["render"][1:4] == (2.0, 3.0, 1) and t1["render"][4]["kind"] == "label"
    assert t2[EVIL][1:4] == (2.0, 8.0, 1) and t2[EVIL][4]["status"] == 500
    # one still running: only its start; one whose begin was not read: only its end
    assert t1["(no endpoint)"][1:4] == (6.0, None, 2) and "status" not in t1["(no endpoint)"][4]
    assert t2["OldController#index"][1:4] == (None, 1.0, 3)
    for th in p["threads"]:
        for d, c in zip(th["markers"]["data"], th["markers"]["category"]):
            assert d["type"] in schema and cats[c]["name"] == "Request or job"
    keys = {f["key"] for f in schema["SdbUnit"]["data"]}
    assert keys == {"kind", "endpoint", "request_id", "status"}


def test_firefox_markers_follow_the_endpoint_and_thread_filters(trace):
    only = markers(json.loads(run(trace, "firefox", "--endpoint", "ReportsController#show")))
    assert {m[0] for ms in only.values() for m in ms} == {"ReportsController#show", "render"}, only
    waiter = markers(json.loads(run(trace, "firefox", "--thread", "puma srv 1")))
    assert list(waiter) == [T1] and len(waiter[T1]) == 2


def test_firefox_gives_a_track_to_a_thread_whose_requests_have_no_sample_shown(trace, tmp_path):
    # every sample of thread 2 is of a request other than ReportsController#show: filtered out,
    # yet --slower-than keeps its 6 ms request, whose marker needs the track
    p = json.loads(run(trace, "firefox", "--slower-than", "5ms"))
    seen = markers(p)
    assert [m[0] for m in seen[T1]] == [EVIL]
    assert [m[0] for m in seen.get(T0, [])] == []


def test_speedscope_by_endpoint_has_a_profile_per_endpoint_largest_first(trace):
    d = json.loads(run(trace, "speedscope", "--by", "endpoint", "--sample-type", "wall"))
    got = {p["name"]: sum(p["weights"]) // (MS // 2) for p in d["profiles"]}
    # samples (0.5 ms each) per endpoint, both threads together
    assert got == {EVIL: 12, "ReportsController#show": 8, "(no endpoint)": 8, "OldController#index": 2,
                   "(no request or job)": 10}, got
    names = [p["name"] for p in d["profiles"]]
    assert names[0] == EVIL and names[-1] == "(no request or job)"
    assert not any(f["name"].startswith("[") for f in d["shared"]["frames"]), "a grouping root frame leaked in"


def test_speedscope_by_request_has_a_profile_per_request_in_the_order_they_began(trace):
    d = json.loads(run(trace, "speedscope", "--by", "request", "--sample-type", "wall"))
    names = [p["name"] for p in d["profiles"]]
    assert names == [f"OldController#index req-0 (began before, {T1})",
                     f"ReportsController#show req-a (4.0 ms, {T0})",
                     f"{EVIL} req-b (6.0 ms, {T1})",
                     f"(no endpoint) span 4 (not ended in the recording, {T0})",
                     "(no request or job)"], names
    # the label's samples belong to the request it is in
    assert sum(d["profiles"][1]["weights"]) == 8 * MS // 2


def test_other_formats_put_each_request_under_a_root_frame_of_its_own(trace):
    roots = {}
    for line in run(trace, "collapsed", "--by", "request").splitlines():
        stack, n = line.rsplit(" ", 1)
        root = stack.split(";")[1]       # after the thread's frame
        roots[root] = roots.get(root, 0) + int(n)
    assert roots == {"[ReportsController#show req-a]": 8, "[(no endpoint) span 4]": 8,
                     "[OldController#index req-0]": 2, "(no request or job)": 10,
                     "[Evil\\x1b]0,owned\\x07Controller#show req-b]": 12}, roots
