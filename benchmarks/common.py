"""Shared helpers for the sdb benchmarks: starting pinned Ruby targets, CPU
placement, summaries (median, min-max), Markdown tables, machine description."""
from __future__ import annotations

import ctypes
import datetime
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAMS = os.path.join(ROOT, "benchmarks", "programs")
RESULTS = os.path.join(ROOT, "benchmarks", "results")
BIN = os.path.dirname(sys.executable)
sys.path[:0] = [os.path.join(ROOT, "sidecar"), os.path.join(ROOT, "symbolizer")]

# The target runs on one core, the sampler/sidecar (and this harness) on another.
_CPUS = sorted(os.sched_getaffinity(0))
TARGET_CPU = _CPUS[-1]
SAMPLER_CPU = _CPUS[0]
PINNED = len(_CPUS) >= 2


def pin_self(cpu: int = SAMPLER_CPU) -> None:
    """Pin this process (and the threads it starts later) to one core."""
    if PINNED:
        os.sched_setaffinity(0, {cpu})


def taskset(cpu: int) -> list:
    return ["taskset", "-c", str(cpu)] if PINNED else []


def _die_with_parent() -> None:
    # PR_SET_PDEATHSIG: no stray targets if the harness is killed
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)


@contextmanager
def ruby_target(cfg, program: str, *argv, stdin=False, ready_timeout: float = 20.0):
    """Start benchmarks/programs/<program> pinned to TARGET_CPU with the sdb gem;
    yield the Popen once it printed "ready" and its registry exists; kill it after."""
    # no --gem-home: the gem installed in the Ruby itself (scripts/rubies does that)
    env = dict(os.environ, GEM_HOME=cfg.gem_home, GEM_PATH=cfg.gem_home) if cfg.gem_home else dict(os.environ)
    cmd = taskset(TARGET_CPU) + [cfg.ruby, os.path.join(PROGRAMS, program)] + [str(a) for a in argv]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                         env=env, text=True, preexec_fn=_die_with_parent)
    try:
        line = p.stdout.readline()  # the programs print "ready" within a second
        if not line.startswith("ready"):
            raise RuntimeError(f"{program} {' '.join(map(str, argv))} did not start (said {line!r})")
        deadline = time.monotonic() + ready_timeout
        while not os.path.exists(f"/dev/shm/sdb-{p.pid}"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{program}: no registry /dev/shm/sdb-{p.pid}")
            time.sleep(0.01)
        yield p
    finally:
        p.kill()
        p.wait()


def summary(values) -> dict:
    v = sorted(values)
    return {"median": statistics.median(v), "min": v[0], "max": v[-1], "n": len(v), "values": list(values)}


def fmt(s: dict, digits: int = 2, scale: float = 1.0) -> str:
    """'median (min-max)' of a summary()."""
    f = f"{{:.{digits}f}}"
    if s["n"] == 1:
        return f.format(s["median"] * scale)
    return f"{f.format(s['median'] * scale)} ({f.format(s['min'] * scale)}-{f.format(s['max'] * scale)})"


def markdown_table(headers, rows) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine(cfg) -> dict:
    ruby = subprocess.run([cfg.ruby, "-v"], capture_output=True, text=True).stdout.strip()
    return {"cpu": _cpu_model(), "cores": os.cpu_count(), "kernel": platform.release(), "ruby": ruby,
            "python": platform.python_version(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "pinning": (f"target on CPU {TARGET_CPU}, sampler/sidecar on CPU {SAMPLER_CPU} (taskset)"
                        if PINNED else "not pinned (one CPU)")}


def git_commit() -> str:
    r = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no", "sidecar", "gem"],
                           capture_output=True, text=True).stdout.strip()
    return r.stdout.strip() + ("+uncommitted sidecar/gem changes" if dirty else "")


def write_result(cfg, name: str, params: dict, rows: list, table: str, extra: dict = None) -> str:
    os.makedirs(RESULTS, exist_ok=True)
    # a --quick smoke run does not overwrite the full run's numbers
    path = os.path.join(RESULTS, f"{name}{'-quick' if cfg.quick else ''}.json")
    doc = {"benchmark": name, "quick": cfg.quick, "machine": machine(cfg), "commit": git_commit(),
           "params": params, "rows": rows, "table": table}
    doc.update(extra or {})
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    return path


def proc_cpu_ns(pid: int) -> dict:
    """On-CPU time of each thread of pid, in ns (from /proc/<pid>/task/<tid>/schedstat)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                out[int(tid)] = int(f.read().split()[0])
        except (OSError, ValueError):
            pass
    return out
