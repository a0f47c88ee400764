"""The one recording every output-format test uses (tests/programs/formats.rb: four named
threads, busy, competing for the GVL, sleeping and blocked), made once per test session with the
Ruby under test, and a helper that runs `sdb-symbolize` on it."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Dict, List

from conftest import REPO, record_program, read_trace

_cache: Dict[str, object] = {}
SYMBOLIZE = [sys.executable, "-m", "sdb_symbolize.cli"]


def formats_trace(tmp_path_factory):
    """(path, Trace): a 1.5 s recording of formats.rb at 1 kHz, made on first use."""
    if "trace" not in _cache:
        path = record_program(tmp_path_factory.mktemp("formats"), "formats.rb", duration_s=1.5)
        _cache["trace"] = (path, read_trace(path))
    return _cache["trace"]


def symbolize(trace: Path, fmt: str, *args: str, out: Path = None, check: bool = True) -> subprocess.CompletedProcess:
    """`sdb-symbolize TRACE --format FMT ARGS` (to `out` when given; else stdout, as bytes)."""
    cmd: List[str] = [*SYMBOLIZE, str(trace), "--format", fmt, *args]
    if out is not None:
        cmd += ["-o", str(out)]
    r = subprocess.run(cmd, capture_output=True, timeout=120, cwd=str(REPO))
    if check:
        assert r.returncode == 0, f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.decode(errors='replace')}"
    return r


def expected_samples(trace, idle: bool = True) -> int:
    """How many samples the trace holds (those of blocked threads only with idle)."""
    return sum(1 for s in trace.samples if idle or s[3] != 3)


# ---------------------------------------------------------------- reading each format back
def thread_labels(trace) -> Dict[int, str]:
    from sdb_symbolize.resolve import thread_label
    return {serial: thread_label(th, serial) for serial, th in trace.threads.items()}


def expected_per_thread(trace, idle: bool = True, keep=lambda s: True) -> Dict[str, int]:
    labels = thread_labels(trace)
    out: Dict[str, int] = {}
    for s in trace.samples:
        if (idle or s[3] != 3) and keep(s):
            out[labels[s[1]]] = out.get(labels[s[1]], 0) + 1
    return out


def per_thread(fmt: str, data: bytes, period_ns: int) -> Dict[str, int]:
    """Samples per thread label, read back from one output (summaries: {"*": total})."""
    import gzip
    import json
    import re

    from sdb_symbolize.reporters.json_lines import read_samples
    out: Dict[str, int] = {}

    def add(k, n):
        out[k] = out.get(k, 0) + n

    if fmt == "collapsed":
        for line in data.decode().splitlines():
            stack, n = line.rsplit(" ", 1)
            add(stack.split(";", 1)[0], int(n))
    elif fmt == "speedscope":
        for p in json.loads(data)["profiles"]:
            if p["name"].endswith(" [cpu]"):
                continue            # the running samples again (a profile per sample type): wall has them all
            assert sum(p["weights"]) % period_ns == 0
            add(p["name"].removesuffix(" [wall]"), sum(p["weights"]) // period_ns)
    elif fmt == "pprof":
        from sdb_symbolize.pprof import Profile
        prof = Profile()
        prof.ParseFromString(gzip.decompress(data))
        st = prof.string_table
        for s in prof.sample:
            labels = {st[l.key]: (st[l.str] if l.str else l.num) for l in s.label}
            assert s.value[1] == s.value[0] * period_ns
            # the recording's threads are all named: their label is "thread NAME (tid TID)"
            add(f"thread {labels['thread_name']} (tid {labels['thread_id']})", s.value[0])
    elif fmt == "flamegraph":
        m = re.search(rb'<script id="sdb-data" type="application/json">(.*?)</script>', data, re.S)
        doc = json.loads(m.group(1))
        for name, loc, total, parent in doc["nodes"][1:]:
            if parent == 0:
                add(doc["strings"][name], total)
    elif fmt == "firefox":
        for th in json.loads(data)["threads"]:
            add(th["name"], th["samples"]["length"])
    elif fmt in ("summary", "summary-by-line"):
        m = re.match(rb"sdb summary: ([\d,]+) samples", data)
        add("*", int(m.group(1).replace(b",", b"")))
    elif fmt == "json":
        for rec in read_samples(data.decode().splitlines()):
            add(rec["thread"], 1)
    elif fmt == "otlp":
        from otlp_decode import decode, samples
        for s in samples(decode(data)):
            if s.type == "wall":
                assert s.values == [period_ns] * len(s.timestamps)
                add(f"thread {s.attributes['thread.name']} (tid {s.attributes['thread.id']})", len(s.timestamps))
    else:
        raise AssertionError(f"no reader for {fmt}")
    return out
