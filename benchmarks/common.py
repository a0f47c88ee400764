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

# the tree measured: this one, or SDB_BENCH_ROOT's (compare_builds.py --bench-root: one tree's benchmark
# code measuring another tree's build)
ROOT = os.environ.get("SDB_BENCH_ROOT") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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
        reap(p)


@contextmanager
def hogs(n: int):
    """n `yes > /dev/null` beside the block (not pinned: they load every core), killed after it."""
    ps = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL, preexec_fn=_die_with_parent) for _ in range(n)]
    try:
        yield
    finally:
        for p in ps:
            p.kill()
            p.wait()


def reap(p: subprocess.Popen) -> None:
    """Kill a target and remove the registry a SIGKILLed Ruby cannot remove itself."""
    if p.poll() is None:
        p.kill()
    p.wait()
    try:
        os.unlink(f"/dev/shm/sdb-{p.pid}")
    except FileNotFoundError:
        pass


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
    results = getattr(cfg, "results", RESULTS)  # run.py --results
    os.makedirs(results, exist_ok=True)
    # a --quick smoke run does not overwrite the full run's numbers
    path = os.path.join(results, f"{name}{'-quick' if cfg.quick else ''}.json")
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


def gem_env(cfg, **extra) -> dict:
    """The environment of a Ruby that loads the sdb gem the way a user's does (GEM_HOME from --gem-home,
    else the Ruby's own gem dir) and still finds Debian's gems (Rails, puma, stackprof): the
    trailing ':' in GEM_PATH keeps RubyGems' default path after the given one."""
    env = dict(os.environ, **{k: str(v) for k, v in extra.items()})
    if cfg.gem_home:
        env.update(GEM_HOME=cfg.gem_home, GEM_PATH=cfg.gem_home + ":")
    return env


def cpu_ns_between(a: dict, b: dict) -> int:
    """On-CPU time, in ns, between two proc_cpu_ns readings of one process: what each thread alive at
    the second ran since the first (a thread that ended between them is not counted; subtracting
    the sums instead took the time of threads that ended, such as the sidecar's compile threads,
    off the total: negative CPU)."""
    return sum(v - a.get(t, 0) for t, v in b.items())


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def ebpf_attached(out: str) -> bool:
    """The trace being written has its ebpf_attached record (the eBPF symbolizer is in place)."""
    from sdb_trace import has_record
    return has_record(out, "ebpf_attached")


# A sidecar whose eBPF neither came nor was said missing after this long is hung: bcc's compile takes
# seconds, a minute or more on a loaded machine (it starts at a low priority), never this long.
EBPF_PATIENCE_S = 900.0


def wait_ebpf_attached(p: subprocess.Popen, out: str, said, patience_s: float = EBPF_PATIENCE_S) -> None:
    """Until the trace `out` of sidecar p has its ebpf_attached record. RuntimeError at once when p exits
    or says that eBPF will not come (its notice on stderr; said(): what it said so far), and after
    patience_s only if neither came."""
    deadline = time.monotonic() + patience_s
    while not ebpf_attached(out):
        notice = [line for line in said().splitlines() if line.startswith("sdb: notice: no eBPF symbolizer")]
        if p.poll() is not None or notice:
            raise RuntimeError(f"no eBPF symbolizer: the sidecar {'exited' if p.poll() is not None else 'said'}: "
                               f"{(notice or [said().strip()])[0]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the sidecar said neither that eBPF is attached nor why not in {patience_s:.0f} s")
        time.sleep(0.1)


@contextmanager
def sidecar(pid: int, rate: float, out: str, cpu: int = SAMPLER_CPU, timeout: float = 20.0, extra=()):
    """`sdb-sidecar attach` on pid at rate Hz, pinned to cpu, recording into out until the block
    ends (then SIGINT, as Ctrl-C). Yields the Popen once the recording has begun (trace file there)
    and its eBPF symbolizer is attached (sampling starts before it: what is measured is the steady
    recording; where eBPF cannot be had, after `timeout`); `extra`: more arguments of attach;
    afterwards p.end holds the trace's end record, p.rate_hz the achieved tick rate and p.rusage_s the
    sidecar's user+sys CPU seconds."""
    cmd = taskset(cpu) + [os.path.join(BIN, "sdb-sidecar"), "attach", "--pid", str(pid), "--rate", str(rate),
                          "-o", out, "--quiet", *extra]
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, preexec_fn=_die_with_parent)
    try:
        # begun = the trace grew past its header (the first drain, 100 ms into sampling), or 1 s after
        # the header if nothing was drained yet
        deadline, header = time.monotonic() + timeout, None
        while True:
            if p.poll() is not None:
                raise RuntimeError(f"sdb-sidecar exited with {p.returncode}: {p.stderr.read().strip()}")
            size = os.path.getsize(out) if os.path.exists(out) else 0
            if size and header is None:
                header = (size, time.monotonic())
            if header and (size > header[0] or time.monotonic() > header[1] + 1.0) and \
                    (ebpf_attached(out) or time.monotonic() > deadline):
                break
            if time.monotonic() > deadline and not header:
                raise RuntimeError("sdb-sidecar did not start recording")
            time.sleep(0.02)
        yield p
    finally:
        # a target that exited ends the recording by itself (a SIGINT then could cut its closing short)
        if p.poll() is None and _alive(pid):
            p.send_signal(signal.SIGINT)
        try:
            _, status, ru = os.wait4(p.pid, 0)
            p.returncode = os.waitstatus_to_exitcode(status)
            p.rusage_s = ru.ru_utime + ru.ru_stime
        except ChildProcessError:
            p.rusage_s = 0.0
        err = p.stderr.read()
        p.stderr.close()
    if p.returncode != 0:
        raise RuntimeError(f"sdb-sidecar exited with {p.returncode}: {err.strip()}")
    from sdb_trace import TraceReader
    with TraceReader(out) as r:
        for _ in r.records():
            pass
        p.end = r.end or {}
        span_s = (p.end.get("at_ns", 0) - r.header.get("start_mono_ns", 0)) / 1e9
        p.rate_hz = p.end.get("ticks", 0) / span_s if span_s > 0 else 0.0  # achieved, over the whole recording
