"""flamegraph and firefox are handed CompactStacks (samples.py: a stack's frames as 2- or 4-byte
numbers in a table of the pass's frames, not a tuple; issue 44): their output is the bytes they
write from tuple stacks, equal stacks stay one Stack, and numbers past 2 bytes widen."""
from __future__ import annotations

import random
from array import array

import pytest

from sdb_symbolize.options import ProfileOptions
from sdb_symbolize.profile import render_bytes
from sdb_symbolize.reporters.firefox import FirefoxReporter
from sdb_symbolize.reporters.flamegraph import FlamegraphReporter
from sdb_symbolize.reporters.prefixes import StackTable
from sdb_symbolize.resolve import Frame
from sdb_symbolize.samples import CompactStack, SamplePass
from sdb_trace import TraceFile, TraceWriter
from test_profile_library import HEADER, write_recording

pytestmark = pytest.mark.once


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    # two processes, an ISeq address named twice (stacks named per sample), an eBPF pause, spans
    path = tmp_path_factory.mktemp("compact") / "trace.msgpack"
    with open(path, "wb") as f:
        write_recording(TraceWriter(f, HEADER))
    return str(path)


VARIANTS = [dict(), dict(idle=True, states=True), dict(lines=False), dict(by="endpoint"), dict(by="request"),
            dict(merge_processes=True), dict(labels="ruby-profile-frames"), dict(from_s=0.005, to_s=0.030)]


@pytest.mark.parametrize("fmt", ["flamegraph", "firefox"])
@pytest.mark.parametrize("kw", VARIANTS, ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()) or "plain")
def test_tree_formats_from_compact_stacks_are_the_bytes_from_tuple_stacks(trace, fmt, kw, monkeypatch):
    options = ProfileOptions(format=fmt, **kw)
    compact = render_bytes(TraceFile(trace), options)
    for cls in (FlamegraphReporter, FirefoxReporter):
        monkeypatch.setattr(cls, "compact_stacks", False)
    tuples = render_bytes(TraceFile(trace), options)
    assert compact == tuples and len(compact) > 100


def test_equal_frames_are_one_compact_stack_and_numbers_past_two_bytes_widen_it(trace):
    sp = SamplePass(TraceFile(trace), ProfileOptions(format="flamegraph"))
    sp.use_compact_stacks()
    many = [Frame(f"m{i}", "/a.rb", i) for i in range(70_000)]
    small = sp.intern(tuple(many[:3]) * 2)
    assert isinstance(small, CompactStack) and small.code == "H"
    assert small.frames == tuple(many[:3]) * 2 and len(small.data) == 12
    # equal by name (as tuples compare), other Frame objects: the same Stack
    assert sp.intern(tuple(Frame(f"m{i}", "/a.rb", i) for i in (0, 1, 2)) * 2) is small
    wide = sp.intern(tuple(many))
    assert wide.code == "I" and wide.frames == tuple(many) and wide.id != small.id
    # a stack of small numbers after the table outgrew 2 bytes: still the 2-byte key, the same Stack
    assert sp.intern(tuple(many[:3]) * 2) is small
    assert sp.intern(()).frames == ()


def test_a_stack_table_widened_past_two_byte_frame_numbers_is_the_dictionary_tree():
    rnd = random.Random(7)
    t = StackTable()
    ref, rows = {}, []
    paths = []
    for k in range(300):
        alphabet = [1, 2, 3] if k < 150 else [1, 2, 3, 65_535, 65_536, 1 << 20]   # 4-byte numbers from half-way
        base = rnd.choice(paths) if paths and rnd.random() < 0.6 else []
        p = base[:rnd.randrange(len(base) + 1)] + [rnd.choice(alphabet) for _ in range(rnd.randrange(1, 8))]
        paths.append(p)
        got = t.add(array("I", p), 1)
        i = -1
        for fr in p:
            row = (i, fr)
            if row not in ref:
                ref[row] = len(rows)
                rows.append(row)
            i = ref[row]
        assert got == i
    assert list(zip(t.prefix, t.frame)) == rows
