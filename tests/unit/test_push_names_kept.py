"""The push names each interval with the tables read so far and keeps the stacks it named for the
next interval (sdb_symbolize.samples.KeptNames): a kept name must be the one a fresh pass over the
same tables gives, so a name a later record changes (an address named again, a symbol that comes
after its first samples, an eBPF pause) is named again, and the two Pyroscope profiles made from one
pass decode as the pprof sdb-symbolize writes of the same samples."""
from __future__ import annotations

import gzip
import io
from collections import Counter

from sdb_sidecar.push import pyroscope
from sdb_sidecar.push.cutter import IntervalCutter, StreamTap
from sdb_symbolize.options import ProfileOptions
from sdb_symbolize.pprof import Profile
from sdb_symbolize.profile import render_bytes
from sdb_trace import KIND_RUBY, STATE_BLOCKED, STATE_RUNNING, TraceWriter

START = 7_000_000_000
MS = 1_000_000
HEADER = {"pid": 400, "ruby": "3.4.5", "ruby_description": "ruby 3.4.5", "layout": "3.4", "rate_hz": 1000,
          "start_mono_ns": START, "start_wall_ns": 1_700_000_000_000_000_000, "hostname": "h",
          "sdb_version": "0.1.0", "command": ["ruby", "app.rb"], "max_depth": 2048}


class Recording:
    """A TraceWriter tapped as the sidecar's (no file), cut like the push thread cuts it; each cut
    gives the interval's collapsed profile with kept names and the one a fresh pass gives."""

    def __init__(self):
        self.tap = StreamTap()
        self.w = TraceWriter(io.BytesIO(), HEADER, compress=False, tap=self.tap.for_writer())
        self.cutter = IntervalCutter(self.tap)

    def cut(self):
        got = []

        def on_interval(interval):
            trace = next(iter(self.cutter.files.values()))   # the interval's source
            fresh = render_bytes(trace, ProfileOptions(format="collapsed", idle=True))
            got.append((interval.render("collapsed"), fresh, interval))
        self.cutter.cut(on_interval)
        assert len(got) == 1
        return got[0]


def lines(collapsed: bytes) -> Counter:
    out = Counter()
    for line in collapsed.decode().splitlines():
        stack, n = line.rsplit(" ", 1)
        out[stack] += int(n)
    return out


def start(rec: Recording):
    w = rec.w
    w.thread(1, 401, "worker", START, 1, START)
    w.iseq(0x1000, "main", "main", "/app/app.rb", None, 1, 1, START)
    w.iseq(0x2000, "crunch", "crunch", "/app/app.rb", None, 5, 1, START)
    w.frames(0, [KIND_RUBY] * 3, [0x1000, 0x2000, 0x3000], [0x1001, 0x2001, 0x3001], [0, 0, 0], [1, 6, 9])
    w.stacks(0, [[1, 0], [2, 0]])


def test_a_name_an_address_reused_later_changes_is_named_again():
    rec = Recording()
    start(rec)
    rec.w.samples(START, [i * MS for i in range(10)], [1] * 10, [0] * 10, [STATE_RUNNING] * 10)
    kept, fresh, _ = rec.cut()
    assert kept == fresh and any("crunch" in s for s in lines(kept))
    # the ISeq at 0x2000 freed and its address reused by `other`: samples after that are `other`'s
    rec.w.iseq(0x2000, "other", "other", "/app/other.rb", None, 3, 1, START + 50 * MS)
    rec.w.samples(START + 60 * MS, [i * MS for i in range(10)], [1] * 10, [0] * 10, [STATE_RUNNING] * 10)
    kept, fresh, _ = rec.cut()
    assert kept == fresh
    assert any("other" in s for s in lines(kept)) and not any("crunch" in s for s in lines(kept))


def test_a_frame_unnamed_in_one_interval_is_named_once_its_symbol_comes():
    rec = Recording()
    start(rec)
    rec.w.samples(START, [i * MS for i in range(10)], [1] * 10, [1] * 10, [STATE_RUNNING] * 10)
    kept, fresh, _ = rec.cut()
    assert kept == fresh and any("(unknown ISeq 0x3000)" in s for s in lines(kept))
    rec.w.iseq(0x3000, "late", "late", "/app/app.rb", None, 8, 1, START)
    rec.w.samples(START + 20 * MS, [i * MS for i in range(10)], [1] * 10, [1] * 10, [STATE_RUNNING] * 10)
    kept, fresh, _ = rec.cut()
    assert kept == fresh
    assert any("late" in s for s in lines(kept)) and not any("unknown ISeq" in s for s in lines(kept))


def test_names_kept_without_new_symbols_equal_a_fresh_pass_and_an_ebpf_pause_drops_them():
    rec = Recording()
    start(rec)
    for k in range(3):
        rec.w.samples(START + k * 20 * MS, [i * MS for i in range(10)], [1] * 10, [k % 2] * 10,
                      [STATE_RUNNING] * 10)
        kept, fresh, _ = rec.cut()
        assert kept == fresh and sum(lines(kept).values()) == 10
    # an eBPF pause: an ISeq name written before it no longer holds after its start
    rec.w.ebpf_pause(START + 70 * MS, rate=0, backoff_s=0.0)
    rec.w.samples(START + 80 * MS, [i * MS for i in range(10)], [1] * 10, [0] * 10, [STATE_RUNNING] * 10)
    kept, fresh, _ = rec.cut()
    assert kept == fresh and not any("crunch" in s for s in lines(kept))


def pprof_totals(data: bytes, type_index: int) -> Counter:
    p = Profile()
    p.ParseFromString(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)
    st = p.string_table
    names = {f.id: st[f.name] for f in p.function}
    locs = {loc.id: names[loc.line[0].function_id] for loc in p.location}
    out = Counter()
    for s in p.sample:
        state = next((st[lb.str] for lb in s.label if st[lb.key] == "thread_state"), None)
        out[(tuple(locs[i] for i in s.location_id), state)] += s.value[type_index]
    return out


def test_the_two_pyroscope_profiles_of_one_pass_decode_as_sdb_symbolize_s_pprof():
    rec = Recording()
    start(rec)
    rec.w.samples(START, [i * MS for i in range(30)], [1] * 30, [0] * 20 + [1] * 10,
                  [STATE_RUNNING] * 10 + [STATE_BLOCKED] * 20)
    got = {}

    def on_interval(iv):
        trace = next(iter(rec.cutter.files.values()))   # the interval's source
        got["pprof"] = render_bytes(trace, ProfileOptions(format="pprof", idle=True))
        got["profiles"] = pyroscope.profiles(iv)
    rec.cutter.cut(on_interval)
    whole = Profile()
    whole.ParseFromString(gzip.decompress(got["pprof"]))
    types = [whole.string_table[t.type] for t in whole.sample_type]
    wall, cpu = got["profiles"][pyroscope.WALL], got["profiles"][pyroscope.CPU]
    assert len(wall) == 1 and len(cpu) == 1
    assert pprof_totals(wall[0], 1) == pprof_totals(got["pprof"], types.index("wall"))
    running = Counter({k: v for k, v in pprof_totals(got["pprof"], types.index("cpu")).items() if v})
    assert pprof_totals(cpu[0], 1) == running and sum(running.values()) == 10 * MS
    p = Profile()
    p.ParseFromString(cpu[0])
    st = p.string_table
    assert [(st[t.type], st[t.unit]) for t in p.sample_type] == [("samples", "count"), ("cpu", "nanoseconds")]
    assert (st[p.period_type.type], st[p.default_sample_type]) == ("cpu", "cpu")
    assert {st[lb.key] for s in p.sample for lb in s.label} == {"thread_name", "thread_state", "pid"}
    assert all(st[lb.str] == "400" for s in p.sample for lb in s.label if st[lb.key] == "pid")
