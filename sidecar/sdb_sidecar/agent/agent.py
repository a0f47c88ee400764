"""The agent's loop: every SCAN_S (sooner when a registry appears in our /dev/shm) it looks for
processes that run the gem (discovery) and starts a recording for each one that no recording of
its own follows yet (a process tree's root: its descendants are its recording's, as `attach` follows
them); each recording runs in a thread of its own (recorder.TreeRecording: the one assembly `attach`
uses) until its root exits, then its last interval is pushed, its file closed, and it is let go.
SIGTERM/SIGINT: every recording ends the same way, then the agent exits 0."""
from __future__ import annotations

import os
import re
import signal
import sys
import threading
import time
from dataclasses import replace
from typing import Dict, Optional, Tuple

from sdb_trace.output import printable

from ..sampler import _sampler
from ..errors import Exit, SdbError
from ..recording.options import Options
from ..push.pusher import Pusher
from ..recording.recorder import TreeRecording, crashed, select_fds
from ..target.target import open_target, place_of
from ..target.tree import DirectoryWatch, parent_of
from .budget import CpuBudget
from .cgroup import Cgroup, cgroup_of
from .discovery import REGISTRY_DIR, Candidate, Discovery
from .selection import Selection
from .service import service_of

SCAN_S = 1.0                # /proc is scanned this often (discovery: what a scan costs)
PENDING_S = 0.2             # looked at again this often while a registry is still starting ...
PENDING_GIVE_UP_S = 5.0     # ... and left alone if it is not ready (or disabled) by then
MAX_RECORDINGS = 256        # process trees recorded at once; more are left out (counted)


class TreeRun:
    """One process tree's recording, in a thread of its own, until its root exits or the agent stops."""

    def __init__(self, agent: "Agent", recording: TreeRecording, service: str, cgroup: Cgroup):
        self.agent = agent
        self.recording = recording
        self.pid = recording.target.pid
        self.service = service
        self.cgroup = cgroup
        self.counts: Optional[dict] = None
        self.thread = threading.Thread(target=self._run, name=f"sdb-agent-{self.pid}", daemon=True)

    def _run(self) -> None:
        rec = self.recording
        try:
            self.counts = rec.run()
            if rec.crash is not None:
                raise crashed(rec.crash, rec.files.current)
            self.agent.ended(self, None)
        except SdbError as e:
            self.agent.ended(self, e)
        except Exception as e:          # a defect of sdb's: this tree's recording is over, the agent goes on
            self.agent.ended(self, SdbError(f"internal error: {type(e).__name__}: {e}", Exit.FAILED))

    def stop(self) -> None:
        self.recording.tree.interrupt()

    def owns(self, pid: int) -> bool:
        return pid in self.recording.tree.procs


def file_name(service: str, pid: int) -> str:
    """A trace file's name in -o's directory: its service (made safe for a file name), its pid, and the
    moment it starts (pids are reused: a later process never writes over an earlier one's file)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", service)[:64].lstrip(".") or "ruby"
    return f"{safe}.{pid}.{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.msgpack"


class Agent:
    """The agent of one host: `run()` until SIGTERM/SIGINT; returns the exit code."""

    def __init__(self, opts: Options, out_dir: Optional[str], selection: Selection, stream=None,
                 max_cpu: float = 0.0):
        self.opts = opts
        self.budget = CpuBudget(max_cpu) if max_cpu > 0 else None
        self.seen_before: Dict[int, int] = {}              # pid -> start ticks of processes recorded once
        self.out_dir = out_dir
        self.selection = selection
        self.stream = stream or sys.stderr
        self.discovery = Discovery()
        self.runs: Dict[int, TreeRun] = {}                    # root pid -> its recording, while it runs
        self.refused: Dict[int, Tuple[int, int]] = {}         # pid -> (start ticks, registry inode) not to try again
        self.pending: Dict[int, float] = {}                   # pid -> first seen with a registry not ready
        self.recorded = self.left_out = self.failed = 0
        self.start_ns = _sampler.monotonic_ns()
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def say(self, line: str) -> None:
        try:
            self.stream.write(f"sdb: agent: {line}\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass

    # ------------------------------------------------------------------ the loop
    def run(self) -> int:
        def on_signal(signum, frame):
            self._stop.set()
        old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        watch = DirectoryWatch(REGISTRY_DIR)
        self.say(f"started: looking for processes that run the sdb gem every {SCAN_S:g} s, "
                 f"{self.opts.rate_hz:g} Hz" + (f", traces in {self.out_dir}" if self.out_dir else "")
                 + (f", at most {self.budget.max_pct:g} % of a core" if self.budget is not None else ""))
        try:
            while not self._stop.is_set():
                self.scan()
                self.keep_budget()
                ready = select_fds([watch.fd] if watch.fd >= 0 else [], PENDING_S if self.pending else SCAN_S)
                if ready:
                    watch.names()
        finally:
            watch.close()
            self.stop_all()
            for s, h in old.items():
                signal.signal(s, h)
        self.say(f"stopped: {self.recorded} process trees recorded, {self.left_out} left out, "
                 f"{self.failed} failed")
        return 0

    def _running(self) -> list:
        """The recordings now (each thread removes its own at its end)."""
        with self._lock:
            return list(self.runs.values())

    def keep_budget(self) -> None:
        """--max-cpu: over it, every recording restarts at a lower rate (budget.py says why)."""
        lowered = self.budget.lower(self.opts.rate_hz) if self.budget is not None else None
        if lowered is None:
            return
        pct, rate = lowered
        self.say(f"CPU {pct:.1f} % of a core, over --max-cpu {self.budget.max_pct:g}: rate lowered from "
                 f"{self.opts.rate_hz:g} to {rate:g} Hz; every recording restarts at it")
        self.opts = replace(self.opts, rate_hz=rate)
        for r in self._running():
            r.stop()
        self.budget.settle()

    def stop_all(self) -> None:
        """Every recording ends as at its root's exit: its last interval pushed, its file closed."""
        runs = self._running()
        for r in runs:
            r.stop()
        for r in runs:
            r.thread.join()

    def scan(self) -> None:
        now = time.monotonic()
        for c in self.discovery.scan():
            if self._stop.is_set():
                return
            if c.pid in self.runs:
                continue
            key = (c.start_ticks, self._registry_ino(c))
            if self.refused.get(c.pid) == key or self._owned(c.pid):
                continue
            self.refused.pop(c.pid, None)
            self._try(c, key, now)
        live = set(self.discovery.seen)
        for pid in [p for p in self.pending if p not in live]:
            del self.pending[pid]
        for pid in [p for p in self.refused if p not in live]:
            del self.refused[pid]
        for pid in [p for p in self.seen_before if p not in live]:
            del self.seen_before[pid]

    def _registry_ino(self, c: Candidate) -> int:
        try:
            return os.stat(place_of(c.pid).registry).st_ino
        except (OSError, ValueError):
            return 0

    def _owned(self, pid: int) -> bool:
        """Recorded already, or a descendant of a recorded root (its recording opens it itself)."""
        if any(r.owns(pid) for r in self._running()):
            return True
        p = parent_of(pid)
        for _ in range(64):
            if p is None or p <= 1:
                return False
            if p in self.runs:
                return True
            p = parent_of(p)
        return False

    def _refuse(self, c: Candidate, key, why: Optional[str]) -> None:
        self.pending.pop(c.pid, None)
        self.refused[c.pid] = key
        if why is not None:
            self.left_out += 1
            self.say(f"process {c.pid} is not recorded: {printable(why)}")

    def _try(self, c: Candidate, key, now: float) -> None:
        try:
            target = open_target(c.pid, wait_s=0)
        except SdbError as e:
            if e.code == Exit.NO_SUCH_PROCESS:
                self.pending.pop(c.pid, None)
            elif e.code in (Exit.GEM_DISABLED, Exit.REGISTRY_FORMAT) \
                    and now - self.pending.setdefault(c.pid, now) < PENDING_GIVE_UP_S:
                # starting: looked at again soon. A registry seen the moment it is created (the
                # directory watch wakes the agent then) is empty until the gem sizes and fills it:
                # "too small", "bad magic" for a while, never a reason to leave the app out
                pass
            elif e.code in (Exit.NOT_RUBY, Exit.NO_GEM):
                self._refuse(c, key, None)     # a registry left by an earlier process: not ours to record
            else:
                self._refuse(c, key, str(e))
            return
        except OSError as e:
            self._refuse(c, key, f"cannot open its registry: {e}")
            return
        self.pending.pop(c.pid, None)
        service, cgroup = service_of(target), cgroup_of(c.pid)
        if not self.selection.wants(service, cgroup.paths):
            self._refuse(c, key, None)
            return
        if len(self.runs) >= MAX_RECORDINGS:
            self._refuse(c, key, f"{MAX_RECORDINGS} process trees are recorded already")
            return
        # recorded again (a restart at a lower rate): its units of work before it are in the last trace
        again = self.seen_before.get(c.pid) == c.start_ticks
        self.seen_before[c.pid] = c.start_ticks
        from_start = target.info["created_mono_ns"] >= self.start_ns and not again
        opts = replace(self.opts, from_start=from_start,
                       push=replace(self.opts.push, service=service) if self.opts.push is not None else None)
        out = None
        if self.out_dir:
            first = out = os.path.join(self.out_dir, file_name(service, c.pid))
            n = 1
            while os.path.exists(out):          # the same process recorded again within a second
                out, n = f"{first[:-len('.msgpack')]}-{n}.msgpack", n + 1
        try:
            recording = TreeRecording(target, out, opts, self.stream, labels=cgroup.labels())
        except SdbError as e:
            self._refuse(c, key, str(e))
            return
        run = TreeRun(self, recording, service, cgroup)
        with self._lock:
            self.runs[c.pid] = run
        self.recorded += 1
        where = "".join(f", {k} {v}" for k, v in cgroup.labels().items())
        self.say(f"recording process {c.pid} ({printable(' '.join(target.command)[:80])}): service "
                 f"{printable(service)}{where}" + (f", to {out}" if out else ""))
        run.thread.start()

    def ended(self, run: TreeRun, error: Optional[SdbError]) -> None:
        """A recording is over (its thread's last act): said, and let go."""
        with self._lock:
            if self.runs.get(run.pid) is run:
                del self.runs[run.pid]
        if error is not None:
            self.failed += 1
            self.say(f"process {run.pid} ({printable(run.service)}): {printable(str(error))}")
            return
        c = run.counts or {}
        n = c.get("processes", 1)
        self.say(f"process {run.pid} ({printable(run.service)}) done ({c.get('reason')}): {c.get('samples', 0)} "
                 f"samples of {c.get('threads', 0)} threads" + (f" in {n} processes" if n > 1 else ""))
        if c.get("push"):
            for line in Pusher.result_lines(c["push"]):
                self.say(line[len("sdb: "):])
