"""Every reporter, on a stack whose ISeq address was reused: samples before the second symbol
keep the first name, samples after it get the second (the aggregating pass counts such stacks
sample by sample, by time), and the filters apply to them as to any other."""
from __future__ import annotations

import gzip
import json

import pytest

from conftest import symbolized
from sdb_trace import KIND_CFUNC, KIND_RUBY, TraceWriter
from sdb_symbolize.reporters import REPORTERS
from sdb_symbolize.reporters.json_lines import read_samples

pytestmark = pytest.mark.once

START = 1_000_000_000
HEADER = {"pid": 77, "ruby": "3.1.2", "ruby_description": "ruby 3.1.2", "layout": "3.1", "rate_hz": 1000,
          "start_mono_ns": START, "start_wall_ns": 1_700_000_000_000_000_000, "hostname": "h", "sdb_version": "0.1.0",
          "command": ["ruby", "reuse.rb"], "max_depth": 2048}


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    """Thread 1 samples stack 0 (<main> -> the reused ISeq) 10 times before the address is
    reused at +5 ms and 10 times after it; thread 2 samples a C function, blocked, throughout."""
    path = tmp_path_factory.mktemp("reuse") / "reuse.msgpack"
    with open(path, "wb") as f:
        w = TraceWriter(f, HEADER)
        w.thread(1, 101, "main", START, 1, START)
        w.thread(2, 102, "waiter", START, 0, START)
        w.iseq(0x1000, "<main>", "<main>", "/app/reuse.rb", None, 1, 0, START)
        w.iseq(0x2000, "old_method", "old_method", "/app/reuse.rb", None, 3, 1, START)
        w.cfunc(0xbeef, "sleep", START)
        w.frames(0, [KIND_RUBY, KIND_RUBY, KIND_CFUNC], [0x2000, 0x1000, 0], [0x2010, 0x1010, 0], [0, 0, 0xbeef],
                 [4, 9, 0])
        w.stacks(0, [[0, 1], [2, 1]])
        w.samples(START, [i * 500_000 for i in range(10)], [1] * 10, [0] * 10, [1] * 10)
        w.iseq(0x2000, "new_method", "new_method", "/app/reuse.rb", None, 20, 1, START + 5_000_000)
        w.samples(START + 5_000_000, [i * 500_000 for i in range(10)], [1] * 10, [0] * 10, [1] * 10)
        w.samples(START, [i * 1_000_000 for i in range(10)], [2] * 10, [1] * 10, [3] * 10)
        w.end(at_ns=START + 10_000_000, reason="duration", ticks=20, late=0, missed=0, samples=30, torn=0,
              retried=0, errors=0, threads=2, symbol_errors=0)
    return path


def names_and_counts(fmt, data: bytes):
    """{leaf name: samples} for thread main, from any format."""
    out = {}
    if fmt == "collapsed":
        for line in data.decode().splitlines():
            stack, n = line.rsplit(" ", 1)
            out[stack.split(";")[-1].split(" (")[0]] = out.get(stack.split(";")[-1].split(" (")[0], 0) + int(n)
    elif fmt == "json":
        for rec in read_samples(data.decode().splitlines()):
            out[rec["frames"][-1][0]] = out.get(rec["frames"][-1][0], 0) + 1
    elif fmt == "speedscope":
        d = json.loads(data)
        for p in d["profiles"]:
            if p["name"].endswith(" [cpu]"):
                continue                # the running samples again: the wall profiles hold every sample
            for s, w in zip(p["samples"], p["weights"]):
                name = d["shared"]["frames"][s[-1]]["name"]
                out[name] = out.get(name, 0) + w // 1_000_000
    elif fmt == "pprof":
        from sdb_symbolize.pprof import Profile
        p = Profile()
        p.ParseFromString(gzip.decompress(data))
        funcs = {f.id: p.string_table[f.name] for f in p.function}
        locs = {l.id: funcs[l.line[0].function_id] for l in p.location}
        for s in p.sample:
            out[locs[s.location_id[0]]] = out.get(locs[s.location_id[0]], 0) + s.value[0]
    elif fmt == "otlp":
        from otlp_decode import decode, samples
        for s in samples(decode(data)):
            if s.type == "wall" and s.attributes.get("thread.name") == "main":
                out[s.labels[-1]] = out.get(s.labels[-1], 0) + len(s.timestamps)
    elif fmt == "firefox":
        for th in json.loads(data)["threads"]:
            st, fr, fn, strings = th["stackTable"], th["frameTable"], th["funcTable"], th["stringArray"]
            for s in th["samples"]["stack"]:
                name = strings[fn["name"][fr["func"][st["frame"][s]]]]
                out[name] = out.get(name, 0) + 1
    elif fmt == "flamegraph":
        import re
        doc = json.loads(re.search(rb'application/json">(.*?)</script>', data, re.S).group(1))
        nodes, strings = doc["nodes"], doc["strings"]
        parents = {n[3] for n in nodes[1:]}
        for i, n in enumerate(nodes):
            if i not in parents and i:
                out[strings[n[0]]] = out.get(strings[n[0]], 0) + n[2]
    elif fmt.startswith("summary"):
        for line in data.decode().splitlines()[2:]:
            parts = line.split()
            if int(parts[2]):
                name = parts[4] if fmt == "summary" else parts[5]
                out[name] = out.get(name, 0) + int(parts[2])
    return out


# the profiles (`endpoints` names no frames but its units' innermost ones: test_requests*.py)
@pytest.mark.parametrize("fmt", sorted(name for name, r in REPORTERS.items() if not getattr(r, "by_unit", False)))
def test_a_reused_address_is_named_by_time_in_every_format(trace, fmt):
    got = names_and_counts(fmt, symbolized(trace, fmt))
    assert got.get("old_method") == 10 and got.get("new_method") == 10, got
    assert "sleep" not in got                                          # blocked: dropped unless --idle
    got = names_and_counts(fmt, symbolized(trace, fmt, "--from", "0.006", "--thread", "main"))
    assert got == {"new_method": 8}, got                               # 6.0, 6.5, ..., 9.5 ms
