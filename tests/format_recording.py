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
