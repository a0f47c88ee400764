"""Shared fixtures for the sdb test suite.

Targets are real Ruby programs (tests/programs/*.rb) run the way a user runs them: the
installed gem in a project-local GEM_HOME (SDB_RUBY / SDB_GEM_HOME, as `make test` sets them;
defaults computed from the repo when unset). The sidecar and the symbolizer run as
subprocesses of this very Python (`-m sdb_sidecar.cli`, `-m sdb_symbolize.cli`); traces are
read with sdb_trace, the one reader of the format.

Nothing is left behind: every started process is SIGKILLed and reaped at teardown, and its
/dev/shm/sdb-<pid> (left by a SIGKILL, or faked by a test) is removed.
"""
from __future__ import annotations

import os
import shlex
import queue
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import pytest

from ebpf_wait import SidecarProcess
from sdb_trace import KIND_RUBY, TraceReader, iter_samples, load_tables

REPO = Path(__file__).resolve().parent.parent


def load_layoutgen():
    """scripts/layoutgen/gen.py, the layout rows' generator, as a module (it is a script's, not a package's)."""
    if "sdb_layoutgen" not in sys.modules:
        import importlib.util
        spec = importlib.util.spec_from_file_location("sdb_layoutgen", REPO / "scripts" / "layoutgen" / "gen.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["sdb_layoutgen"] = module   # dataclasses look their module up by name
        spec.loader.exec_module(module)
    return sys.modules["sdb_layoutgen"]
PROGRAMS = Path(__file__).resolve().parent / "programs"
SDB_RUBY = os.environ.get("SDB_RUBY") or "/usr/bin/ruby"


# Where the gem is: a GEM_HOME of its own (SDB_GEM_HOME), or, when that is empty, the Ruby's own gem
# directory (scripts/rubies installs it there, as `gem install` does for a user).
SDB_GEM_HOME = os.environ.get("SDB_GEM_HOME", str(REPO / "build" / "gem-home"))
# Extra interpreter flags for every target, e.g. "--yjit" (make test runs the suite with and without)
SDB_RUBY_ARGS = shlex.split(os.environ.get("SDB_RUBY_ARGS", ""))


def ruby_cmd(program, *args) -> List[str]:
    """The command line that runs a target program with the Ruby under test."""
    return [SDB_RUBY, *SDB_RUBY_ARGS, str(program), *args]

REGISTRY_PREFIX = "/dev/shm/sdb-"
READY_TIMEOUT_S = 20.0


def ebpf_missing() -> str:
    """Why eBPF cannot be used here ("" when it can): the tests that need it are skipped with this."""
    from sdb_sidecar.ebpf.bpfload import EbpfUnavailable, check_available
    try:
        check_available()
    except EbpfUnavailable as e:
        return str(e)
    return ""


def kernel_view_missing() -> str:
    """Why the kernel view (Ruby 3.1's thread states from eBPF) cannot be used here ("" when it can):
    eBPF, and the kernel's BTF."""
    from sdb_sidecar.ebpf.kview import BTF_PATH
    if ebpf_missing():
        return ebpf_missing()
    return "" if os.path.exists(BTF_PATH) else f"no kernel BTF at {BTF_PATH}"


def ruby_version() -> tuple:
    """(major, minor) of the Ruby under test."""
    out = subprocess.run([SDB_RUBY, "-e", "print RUBY_VERSION"], capture_output=True, text=True, timeout=60).stdout
    return tuple(int(x) for x in out.split(".")[:2])


def uses_kernel_view() -> bool:
    """A recording with eBPF here takes thread states from the kernel view: Ruby 3.1 (the gem keeps
    them from 3.2 on) on a machine that can run it. It comes after the symbolizer (EbpfHub)."""
    return ruby_version() < (3, 2) and not kernel_view_missing()


def registry_path(pid: int) -> str:
    return f"{REGISTRY_PREFIX}{pid}"


# ------------------------------------------------------------------ Ruby targets
class RubyTarget:
    """A running Ruby program. stdout is read line by line by a background thread."""

    def __init__(self, proc: subprocess.Popen, program: str, stderr_path: Path):
        self.proc = proc
        self.pid = proc.pid
        self.program = program
        self.stderr_path = stderr_path
        self.lines: "queue.Queue[Optional[str]]" = queue.Queue()
        self.ready_line: Optional[str] = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        try:
            for line in self.proc.stdout:
                self.lines.put(line.rstrip("\n"))
        except ValueError:              # stdout closed by cleanup() while this thread still read it
            pass
        self.lines.put(None)

    @property
    def registry(self) -> str:
        return registry_path(self.pid)

    def stderr(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""

    def wait_for_line(self, prefix: str, timeout: float = READY_TIMEOUT_S) -> str:
        """The first stdout line starting with `prefix`; fails clearly on timeout or exit."""
        deadline = time.monotonic() + timeout
        seen = []
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"{self.program} (pid {self.pid}) printed no {prefix!r} line within {timeout:.0f} s; "
                            f"stdout so far: {seen!r}; stderr: {self.stderr()!r}")
            try:
                line = self.lines.get(timeout=min(left, 0.2))
            except queue.Empty:
                continue
            if line is None:
                rc = self.proc.wait()
                pytest.fail(f"{self.program} (pid {self.pid}) exited with {rc} before printing {prefix!r}; "
                            f"stdout: {seen!r}; stderr: {self.stderr()!r}")
            seen.append(line)
            if line.startswith(prefix):
                return line

    def send(self, text: str) -> None:
        self.proc.stdin.write(text)
        self.proc.stdin.flush()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def cleanup(self) -> None:
        self.kill()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream:
                    stream.close()
            except OSError:
                pass
        # a SIGKILLed Ruby cannot unlink its registry (and some tests fake one): remove it
        try:
            os.unlink(self.registry)
        except FileNotFoundError:
            pass


def ruby_env(with_gem: bool = True, extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SDB_", "RUBY", "GEM_"))}
    if with_gem and SDB_GEM_HOME:
        env["GEM_HOME"] = SDB_GEM_HOME
        env["GEM_PATH"] = SDB_GEM_HOME
    env.update(extra or {})
    return env


@pytest.fixture
def ruby_target(tmp_path):
    """Factory: ruby_target("eight_threads.rb", *args) starts the program, waits for its
    "ready" line (stored as .ready_line) and returns a RubyTarget. Killed at teardown."""
    started: List[RubyTarget] = []

    def start(program: str, *args: str, ready: Optional[str] = "ready", env: Optional[Dict[str, str]] = None,
              with_gem: bool = True, timeout: float = READY_TIMEOUT_S) -> RubyTarget:
        path = PROGRAMS / program
        assert path.is_file(), f"no such target program: {path}"
        stderr_path = tmp_path / f"{path.stem}-{len(started)}.stderr"
        with open(stderr_path, "w") as err:
            proc = subprocess.Popen(ruby_cmd(path, *args), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=err, text=True, cwd=str(tmp_path), env=ruby_env(with_gem, env))
        target = RubyTarget(proc, program, stderr_path)
        started.append(target)
        if ready is not None:
            target.ready_line = target.wait_for_line(ready, timeout)
        return target

    yield start
    for t in started:
        t.cleanup()


@pytest.fixture
def other_process():
    """Factory: other_process(["sleep", "30"]) starts any command; killed at teardown."""
    procs: List[subprocess.Popen] = []

    def start(argv: List[str]) -> subprocess.Popen:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(p)
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=10)
        try:
            os.unlink(registry_path(p.pid))
        except FileNotFoundError:
            pass


# ------------------------------------------------------------------ sidecar / symbolizer
SIDECAR = [sys.executable, "-m", "sdb_sidecar.cli"]
SYMBOLIZE = [sys.executable, "-m", "sdb_symbolize.cli"]


def run_sidecar(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*SIDECAR, *args], capture_output=True, text=True, timeout=timeout, cwd=str(REPO))


def run_symbolize(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    # --idle: these tests count every sample, blocked threads included
    return subprocess.run([*SYMBOLIZE, "--idle", *args], capture_output=True, text=True, timeout=timeout, cwd=str(REPO))


def symbolized(trace, fmt: str, *args: str) -> bytes:
    """`sdb-symbolize TRACE --format FMT ARGS...`'s output (bytes), which must exit 0."""
    r = subprocess.run([*SYMBOLIZE, str(trace), "--format", fmt, *args], capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def run_bench_quick(results: Path, *only: str, timeout: float, extra: Sequence[str] = ()) \
        -> subprocess.CompletedProcess:
    """`benchmarks/run.py --quick --only NAME...` on the suite's Ruby, results (JSON) into `results`;
    fails the test unless it succeeded. Speed is never judged from it."""
    names = [a for name in only for a in ("--only", name)]
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "run.py"), "--ruby", SDB_RUBY,
                        "--gem-home", SDB_GEM_HOME, "--quick", *names, "--results", str(results), *extra],
                       capture_output=True, text=True, timeout=timeout, cwd=str(REPO), stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"benchmarks/run.py --quick failed ({r.returncode}):\n{r.stderr[-3000:]}"
    return r


@pytest.fixture
def sidecar_process(tmp_path_factory):
    """Factory: start `sdb-sidecar ARGS` in the background (an ebpf_wait.SidecarProcess: its stderr so
    far can be read while it runs); killed at teardown."""
    procs: List[subprocess.Popen] = []
    errs = tmp_path_factory.mktemp("sidecar-stderr")

    def start(*args: str, prefix: Optional[List[str]] = None) -> subprocess.Popen:
        p = SidecarProcess([*(prefix or []), *SIDECAR, *args], errs / f"{len(procs)}.stderr",
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True, cwd=str(REPO))
        procs.append(p)
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        try:
            p.communicate(timeout=10)
        except (subprocess.TimeoutExpired, ValueError):
            pass


def stderr_lines(text: str) -> List[str]:
    return [line for line in text.splitlines() if line.strip()]


def assert_one_error_line(result: subprocess.CompletedProcess, prog: str) -> str:
    lines = stderr_lines(result.stderr)
    assert len(lines) == 1, f"expected exactly one stderr line, got {lines!r}"
    assert lines[0].startswith(f"{prog}: error:"), lines[0]
    return lines[0]


# ------------------------------------------------------------------ traces
@dataclass
class Trace:
    """A trace read through sdb_trace: every record, plus resolved per-thread samples."""
    path: str
    header: dict
    records: List[dict]
    end: Optional[dict]
    threads: Dict[int, dict]               # serial -> latest thread record (load_tables)
    thread_names: Dict[int, List[str]]     # serial -> every name seen
    thread_ends: Dict[int, dict]           # serial -> thread_end record
    samples: List[tuple] = field(default_factory=list)  # (t_ns, serial, stack_id, state)
    stack_labels: List[List[Optional[str]]] = field(default_factory=list)  # per stack id, innermost first
    tables: Optional[object] = None        # sdb_trace.Tables (frames, stacks, symbols)
    windows: List[int] = field(default_factory=list)    # per sample: its copy window, us (win_us)

    def serial_named(self, name: str) -> int:
        found = [s for s, names in self.thread_names.items() if name in names]
        assert found, f"no thread record named {name!r}; names: {self.thread_names}"
        assert len(found) == 1, f"several threads named {name!r}: {found}"
        return found[0]

    def samples_of(self, serial: int) -> List[tuple]:
        return [s for s in self.samples if s[1] == serial]

    def labels_of(self, sample: tuple) -> List[Optional[str]]:
        return self.stack_labels[sample[2]]


def read_trace(path) -> Trace:
    path = str(path)
    with TraceReader(path) as r:
        header = r.header
        records = list(r.records())
    tables = load_tables(path)
    assert tables.error is None, f"{path}: {tables.error}"
    names: Dict[int, List[str]] = {}
    ends: Dict[int, dict] = {}
    for rec in records:
        if rec["t"] == "thread":
            names.setdefault(rec["serial"], []).append(rec["name"])
        elif rec["t"] == "thread_end":
            ends[rec["serial"]] = rec
    samples: List[tuple] = []
    windows: List[int] = []

    def on_batch(base, dts, threads, stacks, states, wins):
        for dt, th, sid, st in zip(dts, threads, stacks, states):
            samples.append((base + dt, th, sid, st))
        windows.extend(wins)

    iter_samples(path, on_batch, windows=True)
    labels = []
    for stack in tables.stacks:
        row = []
        for fid in stack:
            if tables.frame_kind[fid] == KIND_RUBY:
                syms = tables.iseqs.get(tables.frame_iseq[fid])     # the first name at the address
                row.append(syms[0].label if syms else None)
            else:
                row.append(None)
        labels.append(row)
    return Trace(path, header, records, tables.end, tables.threads, names, ends, samples, labels, tables, windows)


# ------------------------------------------------------------------ registry
HEADER_FORMAT = "<8sIIIIIIII"   # magic, version, header_size, slot_size, slot_count, slots_offset, pid, status, gc_active
SLOT_FORMAT = "<QIIQ"           # gen, live, native_tid, serial (the slot's first 24 bytes)


def read_registry(path: str) -> dict:
    """The registry header and every slot's (gen, live, native_tid, serial, name), located with the
    header's own slots_offset and slot_size (docs/registry-format.md)."""
    with open(path, "rb") as f:
        data = f.read()
    (magic, version, header_size, slot_size, slot_count, slots_offset, pid, status,
     _r) = struct.unpack_from(HEADER_FORMAT, data, 0)
    slots = []
    for i in range(slot_count):
        off = slots_offset + i * slot_size
        gen, live, tid, serial = struct.unpack_from(SLOT_FORMAT, data, off)
        name = data[off + 64:off + 128].split(b"\0", 1)[0].decode(errors="replace")
        slots.append({"index": i, "gen": gen, "live": live, "native_tid": tid, "serial": serial, "name": name})
    return {"magic": magic, "version": version, "header_size": header_size, "slot_size": slot_size,
            "slot_count": slot_count, "slots_offset": slots_offset, "pid": pid, "status": status,
            "size": len(data), "slots": slots}


def wait_for(predicate, timeout: float, interval: float = 0.02, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def ebpf_attached_so_far(path) -> bool:
    """The trace still being written says the eBPF symbolizer is attached (its ebpf_attached record)."""
    from sdb_trace import has_record
    return has_record(str(path), "ebpf_attached")


def kernel_view_so_far(path) -> bool:
    """The trace still being written says the kernel view is in (its kernel_view record)."""
    from sdb_trace import has_record
    return has_record(str(path), "kernel_view")


def ebpf_all_in_so_far(path) -> bool:
    """Every eBPF program a recording here uses is in: the symbolizer, and on Ruby 3.1 the kernel
    view, which the hub compiles after it (the in-context reads come before both)."""
    return ebpf_attached_so_far(path) and (not uses_kernel_view() or kernel_view_so_far(path))


def samples_so_far(path) -> int:
    """Samples in a trace that is still being written (0 if it cannot be read yet)."""
    from sdb_trace import samples_so_far as count
    return count(str(path))


def ready_info(target: RubyTarget) -> dict:
    """The JSON a program printed after "ready "."""
    import json
    return json.loads(target.ready_line.split(" ", 1)[1])


def record_program(tmp_dir: Path, program: str, duration_s: float = 1.0, rate_hz: int = 1000) -> Path:
    """Start `program`, record it with `sdb-sidecar attach` for duration_s, kill it; the trace's path.
    For module-scoped fixtures (which cannot use the function-scoped factories)."""
    out = tmp_dir / "trace.msgpack"
    stderr_path = tmp_dir / f"{Path(program).stem}.stderr"
    with open(stderr_path, "w") as err:
        proc = subprocess.Popen(ruby_cmd(PROGRAMS / program), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=err, text=True, cwd=str(tmp_dir), env=ruby_env())
    target = RubyTarget(proc, program, stderr_path)
    try:
        target.ready_line = target.wait_for_line("ready")
        result = run_sidecar("attach", "--pid", str(target.pid), "-r", str(rate_hz), "-d", str(duration_s),
                             "-o", str(out), "--quiet")
        assert result.returncode == 0, result.stderr
    finally:
        target.cleanup()
    return out


def build_test_extension(tmp_path_factory, name: str) -> str:
    """tests/support/NAME (a test-only C extension) compiled for the Ruby under test: its directory."""
    build = tmp_path_factory.mktemp(f"{name}-ext")
    for f in (REPO / "tests" / "support" / name).iterdir():
        shutil.copy(f, build / f.name)
    for cmd in ([SDB_RUBY, "extconf.rb"], ["make"]):
        r = subprocess.run(cmd, cwd=build, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"building tests/support/{name}: {cmd}: {r.stdout}\n{r.stderr}"
    return str(build)


@pytest.fixture(scope="session")
def golden_ext(tmp_path_factory):
    """tests/support/golden (Ruby's own frame labels, for the golden and invisibility tests) compiled
    for the Ruby under test: a directory for $LOAD_PATH."""
    return build_test_extension(tmp_path_factory, "golden")


@pytest.fixture(scope="session")
def sigprof_ext(tmp_path_factory):
    """tests/support/sigprof (the in-handler reference profiler: Ruby's own innermost frame taken in
    its timer signal's handler) compiled for the Ruby under test: a directory for $LOAD_PATH."""
    return build_test_extension(tmp_path_factory, "sigprof")


def process_root(pid: int, command) -> str:
    """The root frame sdb-symbolize gives a process of a trace with several: its pid and its title
    (the command line as `ps` shows it) cut to 80 characters ending in '...' (docs/guide.md)."""
    title = " ".join(command)
    if len(title) > 80:
        title = title[:77] + "..."
    return f"process {pid} ({title})" if title else f"process {pid}"


def record_until_ready(tmp_path, name, program, ruby_args, *attach_args):
    """`program` run with `ruby_args` until it prints "ready", recorded with `attach` (attach_args), killed."""
    proc = subprocess.Popen([SDB_RUBY, *ruby_args, str(PROGRAMS / program)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ruby_env())
    try:
        assert proc.stdout.readline().startswith("ready"), proc.stderr.read() if proc.poll() is not None else ""
        out = tmp_path / f"{name}.msgpack"
        r = run_sidecar("attach", "--pid", str(proc.pid), "-o", str(out), "--quiet", *attach_args)
        assert r.returncode == 0, r.stderr
    finally:
        proc.kill()
        proc.wait()
        if os.path.exists(registry_path(proc.pid)):   # a SIGKILLed Ruby cannot remove it
            os.unlink(registry_path(proc.pid))
    return read_trace(out)
