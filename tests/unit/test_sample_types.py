"""Samples carry a sample type and a value (trace format 4): a recording declares its types once in
its header (the writer's default: wall, every thread's time, and cpu, the samples of running
threads), and every output format shows them as its viewer expects: pprof a sample_type each (read
by `go tool pprof -sample_index`), speedscope a profile per type, the one-type formats the type
chosen with --sample-type. Every format of reporters.REPORTERS is rendered for each type, so a new
format is covered as soon as it is registered."""
from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess

import pytest

from sdb_symbolize.options import ProfileOptions
from sdb_symbolize.pprof import Profile
from sdb_symbolize.profile import render_bytes
from sdb_symbolize.reporters import REPORTERS
from sdb_symbolize.samples import FilterError
from sdb_trace import (KIND_RUBY, STATE_BLOCKED, STATE_GVL_WAIT, STATE_RUNNING, VERSION, Corrupt, TraceFile,
                       TraceWriter, load_tables)

START = 7_000_000_000
MS = 1_000_000
HEADER = {"pid": 400, "ruby": "3.4.5", "ruby_description": "ruby 3.4.5", "layout": "3.4", "rate_hz": 1000,
          "start_mono_ns": START, "start_wall_ns": 1_700_000_000_000_000_000, "hostname": "h",
          "sdb_version": "0.1.0", "command": ["ruby", "app.rb"], "max_depth": 2048}
# thread 1: 30 samples running in `crunch`, 20 waiting for the GVL in `wait_gvl`; thread 2: 10 blocked
RUNNING, WAITING, BLOCKED = 30, 20, 10
ALLOC = [100, 2000, 30]       # bytes of three allocation samples (a measured type)


def write_trace(path, header=HEADER, alloc=False):
    if alloc:
        header = dict(header, sample_types=[
            {"name": "wall", "unit": "nanoseconds", "value": MS},
            {"name": "cpu", "unit": "nanoseconds", "of": 0, "states": [STATE_RUNNING]},
            {"name": "alloc_space", "unit": "bytes"}])
    with open(path, "wb") as f:
        w = TraceWriter(f, header)
        w.thread(1, 401, "", START, 1, START)
        w.thread(2, 402, "sleeper", START, 0, START)
        for addr, label in ((0x1000, "main"), (0x2000, "crunch"), (0x3000, "wait_gvl"), (0x4000, "nap")):
            w.iseq(addr, label, label, "/app/app.rb", None, 1, 1, START)
        w.frames(0, [KIND_RUBY] * 4, [0x1000, 0x2000, 0x3000, 0x4000], [0x1001, 0x2001, 0x3001, 0x4001],
                 [0] * 4, [1, 2, 3, 4])
        w.stacks(0, [[1, 0], [2, 0], [3, 0]])
        n = RUNNING + WAITING
        w.samples(START, [i * MS for i in range(n)], [1] * n, [0] * RUNNING + [1] * WAITING,
                  [STATE_RUNNING] * RUNNING + [STATE_GVL_WAIT] * WAITING)
        w.samples(START, [i * MS for i in range(BLOCKED)], [2] * BLOCKED, [2] * BLOCKED, [STATE_BLOCKED] * BLOCKED)
        if alloc:
            w.samples(START, [5 * MS, 6 * MS, 7 * MS], [1, 1, 1], [0, 0, 1], [STATE_RUNNING] * 3, type=2, value=ALLOC)
        w.end(at_ns=START + 60 * MS, reason="duration", ticks=60, samples=n + BLOCKED)
    return path


@pytest.fixture
def trace(tmp_path):
    return write_trace(tmp_path / "trace.msgpack")


def collapsed_total(data: bytes, leaf: str = "") -> int:
    return sum(int(line.rsplit(" ", 1)[1]) for line in data.decode().splitlines() if leaf in line)


def test_the_writer_declares_wall_and_cpu_in_a_format_4_header(trace):
    t = load_tables(str(trace))
    assert VERSION == 4 and t.header["version"] == 4
    assert [(s.name, s.unit, s.value, s.of, s.states) for s in t.sample_types] == [
        ("wall", "nanoseconds", MS, None, None), ("cpu", "nanoseconds", MS, 0, (STATE_RUNNING,))]
    assert t.sample_count == RUNNING + WAITING + BLOCKED


@pytest.mark.parametrize("fmt", sorted(REPORTERS))
def test_every_format_shows_each_sample_type(trace, fmt):
    # GIVEN a trace with two sample types, WHEN each format renders each type
    source = TraceFile(str(trace))
    out = {typ: render_bytes(source, ProfileOptions(format=fmt, sample_type=typ, idle=True))
           for typ in ("wall", "cpu")}
    # THEN both render, and they differ: the type chosen is shown (pprof: as its default type)
    assert out["wall"] and out["cpu"] and out["wall"] != out["cpu"]
    # and the default is wall, today's output, when no type is named
    default = render_bytes(source, ProfileOptions(format=fmt, idle=True))
    if fmt not in ("pprof", "speedscope", "summary", "summary-by-line", "json", "endpoints"):
        assert default == out["wall"]


def test_one_type_formats_count_the_chosen_type(trace):
    source = TraceFile(str(trace))

    def r(fmt, **kw):
        return render_bytes(source, ProfileOptions(format=fmt, **kw))
    # collapsed: wall counts running and waiting threads (blocked ones with --idle), cpu the running only
    assert collapsed_total(r("collapsed")) == RUNNING + WAITING
    assert collapsed_total(r("collapsed", idle=True)) == RUNNING + WAITING + BLOCKED
    assert collapsed_total(r("collapsed", sample_type="cpu")) == RUNNING
    assert collapsed_total(r("collapsed", sample_type="cpu"), "wait_gvl") == 0
    # the summary says which type it counts, and does not mix waiting with cpu
    summary = r("summary", sample_type="cpu").decode()
    assert summary.startswith(f"sdb summary: {RUNNING} samples of cpu (threads running)")
    assert "wait_gvl" not in summary
    assert r("summary").decode().startswith(f"sdb summary: {RUNNING + WAITING} samples of wall (every thread)")
    lines = [json.loads(x) for x in r("json", sample_type="cpu").decode().splitlines()]
    samples = [x for x in lines if "t" in x]
    assert len(samples) == RUNNING and {x["type"] for x in samples} == {"cpu"}
    firefox = json.loads(r("firefox", sample_type="cpu"))
    assert sum(th["samples"]["length"] for th in firefox["threads"]) == RUNNING


def test_speedscope_has_a_profile_per_type_weighted_in_nanoseconds(trace):
    d = json.loads(render_bytes(TraceFile(str(trace)), ProfileOptions(format="speedscope", idle=True)))
    totals = {p["name"]: sum(p["weights"]) for p in d["profiles"]}
    assert {p["unit"] for p in d["profiles"]} == {"nanoseconds"}
    assert totals == {"thread main (tid 401) [wall]": (RUNNING + WAITING) * MS,
                      "thread sleeper (tid 402) [wall]": BLOCKED * MS,
                      "thread main (tid 401) [cpu]": RUNNING * MS}


def test_pprof_carries_both_types_with_each_samples_values(trace):
    p = Profile()
    p.ParseFromString(gzip.decompress(render_bytes(TraceFile(str(trace)), ProfileOptions(format="pprof", idle=True))))
    st = p.string_table
    assert [(st[v.type], st[v.unit]) for v in p.sample_type] == [("samples", "count"), ("wall", "nanoseconds"),
                                                                 ("cpu", "nanoseconds")]
    assert st[p.default_sample_type] == "wall"
    assert [sum(s.value[i] for s in p.sample) for i in range(3)] == [
        RUNNING + WAITING + BLOCKED, (RUNNING + WAITING + BLOCKED) * MS, RUNNING * MS]
    for s in p.sample:
        state = next(st[lb.str] for lb in s.label if st[lb.key] == "thread_state")
        assert s.value[2] == (s.value[1] if state == "running" else 0)


def go_pprof_total_ms(path, index: str, tmp_path) -> float:
    env = dict(os.environ, HOME=str(tmp_path), GOCACHE=str(tmp_path / "gocache"), GOFLAGS="", GOTOOLCHAIN="local")
    r = subprocess.run(["go", "tool", "pprof", f"-sample_index={index}", "-unit=ms", "-top", str(path)],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    m = re.search(r"of ([\d.]+)ms total", r.stdout)
    assert m, r.stdout
    return float(m.group(1))


def test_go_tool_pprof_reads_each_sample_type_with_its_total(trace, tmp_path):
    if shutil.which("go") is None:
        pytest.skip("no `go` on this machine (scripts/setup-machine installs golang-go)")
    path = tmp_path / "profile.pb.gz"
    path.write_bytes(render_bytes(TraceFile(str(trace)), ProfileOptions(format="pprof", idle=True)))
    assert go_pprof_total_ms(path, "wall", tmp_path) == RUNNING + WAITING + BLOCKED
    assert go_pprof_total_ms(path, "cpu", tmp_path) == RUNNING


def test_a_measured_type_is_summed_by_its_values_in_every_format(tmp_path):
    # GIVEN a trace with an allocation type whose samples carry their bytes
    source = TraceFile(str(write_trace(tmp_path / "alloc.msgpack", alloc=True)))
    for fmt in sorted(REPORTERS):
        assert render_bytes(source, ProfileOptions(format=fmt, sample_type="alloc_space"))
    # THEN collapsed counts bytes, pprof and speedscope carry them beside the time types
    data = render_bytes(source, ProfileOptions(format="collapsed", sample_type="alloc_space"))
    assert collapsed_total(data) == sum(ALLOC) and collapsed_total(data, "wait_gvl") == ALLOC[2]
    p = Profile()
    p.ParseFromString(gzip.decompress(render_bytes(source, ProfileOptions(format="pprof"))))
    assert [p.string_table[v.type] for v in p.sample_type] == ["samples", "wall", "cpu", "alloc_space"]
    assert sum(s.value[3] for s in p.sample) == sum(ALLOC)
    assert sum(s.value[1] for s in p.sample) == (RUNNING + WAITING) * MS      # allocations weigh no time
    d = json.loads(render_bytes(source, ProfileOptions(format="speedscope", sample_type="alloc_space")))
    assert [(p["unit"], sum(p["weights"])) for p in d["profiles"]] == [("bytes", sum(ALLOC))]
    # and the time formats by default show wall, as before
    assert collapsed_total(render_bytes(source, ProfileOptions(format="collapsed"))) == RUNNING + WAITING


def test_an_unknown_sample_type_is_a_usage_error_that_lists_the_types(trace):
    with pytest.raises(FilterError, match=r"--sample-type gvl: .*\(its types: wall, cpu\)"):
        render_bytes(TraceFile(str(trace)), ProfileOptions(format="collapsed", sample_type="gvl"))


def test_a_samples_record_of_a_derived_type_is_corrupt(tmp_path):
    path = tmp_path / "bad.msgpack"
    with open(path, "wb") as f:
        w = TraceWriter(f, HEADER)
        w.frames(0, [KIND_RUBY], [0x1000], [0x1001], [0], [1])
        w.stacks(0, [[0]])
        w.samples(START, [0], [1], [0], [STATE_RUNNING], type=1)   # cpu is derived: never written
        w.end(at_ns=START + MS)
    t = load_tables(str(path))
    assert isinstance(t.error, Corrupt) and "written sample type" in str(t.error)
