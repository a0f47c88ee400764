"""The sampler encodes its sample batches itself (C, no Python objects per sample): the record it
writes must be the one TraceWriter.samples would have written, byte for byte, and read back the same."""
from __future__ import annotations

import io
import random

import msgpack
import pytest

from sdb_sidecar.sampler import _sampler
from sdb_trace import TraceReader, TraceWriter

# every msgpack integer width on both sides of its edges
EDGES = [0, 1, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**63 - 1, 2**64 - 1]


def python_encoding(t_ns, thread, stack, state, win_us, span, tick) -> bytes:
    out = io.BytesIO()
    w = TraceWriter(out, {"pid": 1}, compress=False)
    start = out.tell()
    base = t_ns[0]
    w.samples(base, [t - base for t in t_ns], thread, stack, state, win_us, span, tick)
    return out.getvalue()[start:]


@pytest.mark.parametrize("n", [1, 15, 16, 17, 1000, 65535, 65536, 70000])
def test_sampler_encodes_a_batch_as_trace_writer_does(n):
    # GIVEN samples whose columns take every integer width msgpack has, and times that go back
    # (a retry's sample is older than the tick's first): negative offsets of every width too
    rng = random.Random(n)
    base = 10**13
    t_ns = [base] + [base + rng.choice([-1, -32, -33, -128, -129, -32768, -32769, -2**31, -2**31 - 1, 0, 1,
                                       10**6, 10**9, 2**40]) for _ in range(n - 1)]
    thread = [rng.choice(EDGES) for _ in range(n)]
    stack = [rng.choice([e for e in EDGES if e < 2**32]) for _ in range(n)]
    state = [rng.choice([0, 1, 2, 3, 255, 256]) for _ in range(n)]
    win_us = [rng.choice([0, 1, 127, 128, 65535, 65536, 2**32 - 1]) for _ in range(n)]
    span = [rng.choice(EDGES) for _ in range(n)]
    tick = [rng.choice(EDGES) for _ in range(n)]
    # WHEN the sampler's C encoder writes them
    got = _sampler.encode_samples_for_test(t_ns, thread, stack, state, win_us, span, tick)
    # THEN the bytes are msgpack's own, and the record reads back with the same values
    assert got == python_encoding(t_ns, thread, stack, state, win_us, span, tick)
    rec = msgpack.unpackb(got)
    assert rec["t"] == "samples" and rec["base_ns"] == base
    assert [rec["base_ns"] + d for d in rec["dt_ns"]] == t_ns
    assert (rec["thread"], rec["stack"], rec["state"], rec["win_us"], rec["span"], rec["tick"]) == \
        (thread, stack, state, win_us, span, tick)


def test_an_empty_batch_writes_no_record():
    assert _sampler.encode_samples_for_test([], [], [], [], [], [], []) is None


def test_encoded_record_reads_back_through_the_trace_reader(tmp_path):
    # GIVEN a trace whose sample batch was written pre-encoded
    path = tmp_path / "t.msgpack"
    with open(path, "wb") as f:
        w = TraceWriter(f, {"pid": 1, "rate_hz": 1000})
        w.stacks(0, [[]])
        w.encoded(_sampler.encode_samples_for_test([5, 7], [1, 1], [0, 0], [0, 1], [3, 0], [0, 9], [4, 4]))
        w.end(samples=2)
    # WHEN it is read THEN the samples are there, as written
    with TraceReader(str(path)) as r:
        recs = [rec for rec in r.records() if rec["t"] == "samples"]
    assert len(recs) == 1 and recs[0]["dt_ns"] == [0, 2] and recs[0]["state"] == [0, 1]
