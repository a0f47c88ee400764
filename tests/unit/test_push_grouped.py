"""The push's samples grouped in C as the interval is cut (sdb_sidecar.push._groups, read by
sdb_symbolize.grouped) give the profiles the per-sample pass gives: the same bytes for Pyroscope's
two views, the pprof and the OTLP request, labels and links included, also when a thread's unit of
work and its name change within the interval. The C reader of the sampler's samples record reads
what msgpack reads, and refuses (None: decoded, per sample) what it does not read whole."""
from __future__ import annotations

import io
import random

import msgpack
import pytest

from sdb_sidecar.push import pyroscope
from sdb_sidecar.push import cutter as cutter_mod
from sdb_sidecar.push._groups import SampleGroups, read_samples
from sdb_sidecar.push.cutter import IntervalCutter, StreamTap
from sdb_sidecar.sampler._sampler import encode_samples_for_test
from sdb_symbolize import grouped
from sdb_trace import KIND_CFUNC, KIND_RUBY, STATE_BLOCKED, STATE_GVL_WAIT, STATE_RUNNING, TraceWriter

START = 5_000_000_000
MS = 1_000_000
HEADER = {"pid": 400, "ruby": "3.4.5", "ruby_description": "ruby 3.4.5", "layout": "3.4", "rate_hz": 1000,
          "start_mono_ns": START, "start_wall_ns": 1_700_000_000_000_000_000, "hostname": "h",
          "sdb_version": "0.1.0", "command": ["ruby", "app.rb"], "max_depth": 2048}
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
STATES = [STATE_RUNNING, STATE_BLOCKED, STATE_GVL_WAIT]


def sampler_record(t_ns, serial, stack, state, span):
    """A samples record as the sampler encodes it (native/encode.c)."""
    n = len(t_ns)
    return encode_samples_for_test(t_ns, serial, stack, state, [30] * n, span, [i // 2 for i in range(n)])


def record(with_spans: bool, renamed: bool = False):
    """A recording's stream, tapped: two threads over five stacks in four batches; with_spans, thread
    1 is in a request (with a trace context) for the second batch and in a label for the third, and
    thread 2 is renamed between the second and the third; renamed, an ISeq's address is named again
    between them (its stacks are then named by time)."""
    tap = StreamTap()
    w = TraceWriter(io.BytesIO(), HEADER, compress=False, tap=tap.for_writer())
    w.thread(1, 401, "web", START, 1, START)
    w.thread(2, 402, "worker", START, 1, START)
    w.iseq(0x1000, "main", "main", "/app/app.rb", None, 1, 1, START)
    w.iseq(0x2000, "index", "index", "/app/products.rb", None, 5, 1, START)
    w.iseq(0x9000, "crunch", "crunch", "/app/job.rb", None, 9, 1, START)
    w.cfunc(0x4000, "sleep", START)
    w.frames(0, [KIND_RUBY, KIND_RUBY, KIND_CFUNC, KIND_RUBY, KIND_RUBY],
             [0x1000, 0x2000, 0, 0x9000, 0x2000], [0x1010, 0x2010, 0, 0x9010, 0x2020], [0, 0, 0x4000, 0, 0],
             [2, 6, 0, 10, 7])
    w.stacks(0, [[0], [1, 0], [2, 1, 0], [3, 0], [4, 0]])
    rnd = random.Random(7)
    t = START
    for batch in range(4):
        if with_spans and batch == 1:
            w.spans([1], [1], [0], [1], [t], [1], [None], [0], [None], [TRACE], ["00f067aa0ba902b7"])
        if with_spans and batch == 2:
            w.spans([2, 1], [1, 2], [0, 0], [1, 1], [t, t], [1, 2], ["ProductsController#index", None], [200, 0],
                    ["r-1", None], [TRACE, None], ["00f067aa0ba902b7", None])
            w.thread(2, 402, "worker-renamed", START, 1, t)
        if renamed and batch == 2:
            w.iseq(0x9000, "churn", "churn", "/app/job.rb", None, 12, 1, t)
        n = 300
        times = [t + i * MS // 2 for i in range(n)]
        serial = [1 + i % 2 for i in range(n)]
        span = [(batch if batch in (1, 2) and s == 1 else 0) if with_spans else 0 for s in serial]
        w.encoded(sampler_record(times, serial, [rnd.randrange(5) for _ in range(n)],
                                 [rnd.choice(STATES) for _ in range(n)], span))
        t += n * MS // 2
    if with_spans:
        w.spans([2], [2], [0], [1], [t], [2], ["tagged"], [0], [None])
    return tap


def outputs(with_spans: bool, per_sample: bool, monkeypatch, renamed: bool = False) -> list:
    """Every push payload's profile of the one interval: Pyroscope's views, the pprof, the OTLP request."""
    with monkeypatch.context() as m:
        taken = []
        run = grouped.run
        m.setattr(grouped, "run", lambda *a: taken.append(run(*a)) or taken[-1])
        if per_sample:
            m.setattr(cutter_mod._File, "sample_groups", lambda self: None)
        got = []
        IntervalCutter(record(with_spans, renamed)).cut(lambda iv: got.append(
            (iv.samples, pyroscope.profiles(iv), iv.render("pprof"), iv.render("otlp", service="shop"),
             iv.render("collapsed"))))
    assert len(got) == 1 and got[0][0] == 1200
    assert taken == [not (per_sample or renamed)] * 4      # each render took the path it was meant to
    return got[0]


@pytest.mark.parametrize("with_spans", [False, True], ids=["no units of work", "units and a rename mid-interval"])
def test_interval_groups_give_the_profiles_per_sample_encoding_gives(with_spans, monkeypatch):
    grouped_out = outputs(with_spans, False, monkeypatch)
    assert grouped_out == outputs(with_spans, True, monkeypatch)
    views = grouped_out[1]
    assert views[pyroscope.WALL] and views[pyroscope.CPU]
    if with_spans:      # the labels the per-sample pass gives are there (both ways: equal above)
        from sdb_symbolize.pprof import Profile
        import gzip
        p = Profile.FromString(gzip.decompress(grouped_out[2]))
        strings = set(p.string_table)
        assert {"ProductsController#index", "worker-renamed", TRACE, "00f067aa0ba902b7", "tagged"} <= strings


def test_read_samples_reads_the_sampler_s_record_as_msgpack_does():
    rnd = random.Random(3)
    n = 700         # past msgpack's 16-element arrays
    t = [(1 << 62) + i * 1000 - rnd.randrange(5000) for i in range(n)]     # a retry's sample: dt < 0
    serial = [rnd.choice([1, 2, 300, 1 << 40]) for _ in range(n)]
    stack = [rnd.randrange(70000) for _ in range(n)]
    state = [rnd.randrange(4) for _ in range(n)]
    span = [rnd.choice([0, 5, (1 << 64) - 1]) for _ in range(n)]
    data = sampler_record(t, serial, stack, state, span)
    rec = msgpack.unpackb(data)
    got = read_samples(data)
    assert (got.n, got.lo, got.hi) == (n, min(t), max(t))
    g = SampleGroups()
    g.add(got, 3)
    keys, times = g.keys(), g.times()
    expect: dict = {}
    for i in range(n):
        key = (3, rec["thread"][i], rec["stack"][i], rec["state"][i], rec["span"][i])
        expect.setdefault(key, []).append(rec["base_ns"] + rec["dt_ns"][i])
    assert [k[:5] for k in keys] == list(expect) and [k[5] for k in keys] == [len(v) for v in expect.values()]
    assert [list(x) for x in times] == list(expect.values()) and g.samples == n
    g.clear()
    assert g.keys() == [] and g.times() == []
    # what it does not read whole is left to msgpack: a sample type, values, a cut record, a non-record
    for other in ({**rec, "type": 1}, {**rec, "value": [1] * n}, {**rec, "t": "stacks"},
                  {**rec, "dt_ns": [0.5] * n}, {**rec, "state": rec["state"][:-1]}):
        assert read_samples(msgpack.packb(other)) is None
    assert read_samples(data[:-1]) is None and read_samples(data + b"\xc0") is None
    # without a span column its samples are in none, as the per-sample pass reads them
    bare = read_samples(msgpack.packb({k: v for k, v in rec.items() if k not in ("span", "win_us", "tick")}))
    g.add(bare, 0)
    assert {k[4] for k in g.keys()} == {0}


def test_an_interval_with_a_stack_named_by_time_is_passed_sample_by_sample(monkeypatch):
    """Its records, kept as bytes, are decoded for the per-sample pass: each sample named at its time."""
    got = outputs(True, False, monkeypatch, renamed=True)
    assert got == outputs(True, True, monkeypatch, renamed=True)
    names = got[4].decode()
    assert "crunch" in names and "churn" in names
