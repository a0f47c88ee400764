"""Recording into a trace file (attach, record): a process and its descendants that run the gem (a puma
master and its workers, a program and the children it forks), each a Session in a thread of its
own whose Drainer writes that process's records into the one trace (sdb_trace.ProcessWriter); the
signals that end it, one status line, and the end record with the closing counts."""
from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from dataclasses import replace
from typing import IO, Callable, Dict, List, Optional

from sdb_trace import TraceWriteError, TraceWriter
from sdb_trace.output import open_output as open_safely

from .. import __version__
from ..sampler import _sampler
from .assembly import Children, ReadyProcess
from .end_counts import file_counts, summed
from ..errors import Exit, SdbError
from .options import Options
from ..push.pusher import Pusher
from ..target.process import forget
from .process_recording import ProcessRecording
from .rotation import Files
from ..ebpf.hub import EbpfHub
from .session import STALL_GRACE_S, realtime_sampling
from .status_line import STATUS_INTERVAL_S, StatusLine
from ..target.target import Target, command_line, permission_error
from ..target.tree import parent_of

TITLE_S = 1.0               # process titles (puma's `puma: cluster worker 0`) are read again this often


def open_output(path: str) -> IO[bytes]:
    """The trace file, opened by the rule of sdb_trace.output (no symlink or file of another user is
    written through) and at its path from the start; unbuffered: TraceWriter writes whole batches."""
    try:
        return open_safely(path, binary=True, publish_now=True, buffering=0).file
    except OSError as e:
        raise SdbError(f"cannot write {path}: {e.strerror}", Exit.OUTPUT) from None


def write_failed(path: str, writer: TraceWriter, e: TraceWriteError) -> SdbError:
    """A write of the trace failed (full disk, I/O error, closed pipe): recording stops, the file
    keeps every batch written before (cut back to a record boundary by TraceWriter)."""
    return SdbError(f"cannot write {path}: {e.strerror}; recording stopped, the trace holds the "
                    f"{writer.written:,} bytes written before", Exit.OUTPUT)


class NullOutput:
    """Where the trace goes when no file is wanted (the agent without -o: its profiles are pushed):
    every write is taken and forgotten, so the recording and its push tap run as with a file."""

    def write(self, data) -> int:
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


class TreeRecording:
    """One recording into a trace (attach, record; each process tree of the agent): its files, its
    pusher and its Tree, opened at once (a target that cannot be read fails here, its file removed).
    `start`, then `step` while `running`, then `close` (every process's last drain, the last
    interval pushed, the end record): the counts. `abort` after an exception. out_path None: no
    file (NullOutput). labels: more header keys (the agent's container_id, pod_uid). on_closed(path):
    called once per trace file finished, rotated or the last (rotation.Files)."""

    def __init__(self, target: Target, out_path: Optional[str], opts: Options, status_stream=None,
                 labels: Optional[dict] = None, on_closed: Optional[Callable[[str], None]] = None):
        self.target, self.opts = target, opts
        self.status_stream = status_stream or sys.stderr
        self.files = Files(out_path if out_path is not None else os.devnull, opts,
                           on_closed if out_path is not None else None)
        if out_path is not None:
            path = self.files.next()
            out = open_output(path)
        else:
            out = NullOutput()
        try:
            ready = ReadyProcess(target, opts)
        except SdbError:
            out.close()
            if out_path is not None:
                os.unlink(path)
            raise
        header = {
            "pid": target.pid, "ruby": target.info["ruby"], "ruby_description": target.info["ruby_description"],
            "layout": target.info["layout"], "rate_hz": opts.rate_hz, "hostname": socket.gethostname(),
            "sdb_version": __version__, "command": target.command, "max_depth": opts.max_depth, **(labels or {}),
        }
        service = (opts.push.service if opts.push is not None else None) or target.service
        if service:
            header["service"] = service     # --service, else the app's own (docs/trace-format.md)
        self.pusher = Pusher(opts.push, target.command, self.status_stream, target.service) \
            if opts.push is not None else None
        tap = self.pusher.tap.for_writer() if self.pusher is not None else None
        writer = TraceWriter(out, {**header, "start_mono_ns": _sampler.monotonic_ns(),
                                   "start_wall_ns": _sampler.wall_ns()},
                             batched=True, compress=out_path is not None, tap=tap)
        self.tree = Tree(ready, writer, opts, header=header, files=self.files, out=out, pusher=self.pusher)
        self.finished = False
        self.crash = None

    def start(self) -> None:
        self.tree.start()
        if self.pusher is not None:
            self.pusher.start()

    def running(self) -> bool:
        return self.tree.running()

    def step(self) -> None:
        self.tree.step()

    def finish(self) -> None:
        """The root's recording ended: every other process's ends now (close does it if not done)."""
        if not self.finished:
            self.finished = True
            self.tree.finish()

    def abort(self, e: BaseException) -> None:
        """An exception ended the recording: the sampler threads run without the GIL and must be
        stopped before it can reach the interpreter's exit. Raises what the caller should raise."""
        self.tree.abort()
        if self.pusher is not None:
            self.pusher.abandon()
        if isinstance(e, TraceWriteError):
            raise write_failed(self.files.current, self.tree.writer, e) from None
        raise e

    def run(self, on_step: Optional[Callable[[], None]] = None) -> dict:
        """`start`, `step` while `running` (on_step after each), then `close`: the counts (`crash`:
        whether a process's recording ended on a defect of sdb's). An exception ends it by `abort`."""
        try:
            self.start()
            while self.running():
                self.step()
                if on_step is not None:
                    on_step()
            self.finish()
        except BaseException as e:
            self.abort(e)
        return self.close()

    def close(self) -> dict:
        """After the root's recording ended (`running` false): every process's ends, the last interval
        is pushed, the end record written, the file closed. Returns the counts, or raises the
        SdbError that ended the recording (a write that failed, a defect of sdb's)."""
        tree, pusher, opts, files = self.tree, self.pusher, self.opts, self.files
        self.finish()
        if tree.error is not None:
            raise write_failed(files.current, tree.writer, tree.error)
        crash = tree.crash()
        if tree.stalled:
            d = opts.duration_s
            sys.stderr.write(f"sdb: warning: the sampler thread did not stop {d + 2 * STALL_GRACE_S:.0f} s "
                             f"into a {d:g} s recording; the trace holds what it gathered\n")
        counts = tree.counts()
        if pusher is not None:
            # every sample is written: the last interval is cut and sent (within the pusher's deadline)
            counts["push"] = pusher.finish()
            tree.writer.tap = None
        try:
            tree.writer.end(**file_counts(tree.by_proc, counts))
        except TraceWriteError as e:
            raise write_failed(files.current, tree.writer, e) from None
        tree.out.close()
        files.finished(files.current)
        counts["files"] = list(files.written) if not isinstance(tree.out, NullOutput) else []
        self.crash = crash
        return counts


def record(target: Target, out_path: str, opts: Options, status_stream=None, on_signal=None,
           on_closed: Optional[Callable[[str], None]] = None) -> dict:
    """Record into the trace at out_path until opts.duration_s (0: no limit), Ctrl-C/SIGTERM or the
    target's exit; with opts.children, its descendants that run the gem too, from the moment each
    appears. on_signal(signum), if given, is also called for each SIGINT/SIGTERM (`record`
    forwards them). opts.ebpf: name new ISeqs at birth with the eBPF symbolizer when the machine
    allows it, pausing its creation probes while they fire more than opts.ebpf_max_rate times a
    second (0: never pause). on_closed(path): called once per trace file finished (rotation.Files).
    Returns the closing counts."""
    status_stream = status_stream or sys.stderr
    rec = TreeRecording(target, out_path, opts, status_stream, on_closed=on_closed)
    tree = rec.tree

    def on_stop_signal(signum, frame):
        tree.interrupt()
        if on_signal is not None:
            on_signal(signum)

    old = {s: signal.signal(s, on_stop_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    status = StatusLine(status_stream, opts.quiet, opts.rate_hz, tree)

    try:
        counts = rec.run(status.update)
    finally:
        # our handlers stay until the end record is written: a Ctrl-C while closing only marks it interrupted
        for s, h in old.items():
            signal.signal(s, h)
    status.finish()
    if rec.crash is not None:
        raise crashed(rec.crash, rec.files.current)
    if counts["reason"] == "permission":
        raise permission_error(target.pid, PermissionError(1, "Operation not permitted"))
    return counts


def crashed(crash, path: str) -> SdbError:
    """The one line for a defect of sdb's that ended a process's recording (where it was raised, for
    the report), once the trace is closed with everything written before it."""
    pid, e = crash
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = f" at {os.path.basename(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno}" if tb is not None else ""
    return SdbError(f"internal error while recording process {pid}: {type(e).__name__}: {e}{where}; {path} "
                    f"holds what was recorded until then (its end record's reason: error). This is a bug "
                    f"in sdb: please report this line", Exit.FAILED)


class Tree:
    """The recording of a process and, with opts.children, of its descendants that run the gem. The
    calling thread looks for new processes (assembly.Children: a registry appearing in the root's
    registry directory wakes it; it looks every SCAN_S anyway) and updates the status line; each
    process records in a thread of its own. The recording ends when the root's ends (its exit, the
    duration, a signal): the others are stopped then. One eBPF hub serves every process."""

    def __init__(self, root: ReadyProcess, writer: TraceWriter, opts: Options, header: Optional[dict] = None,
                 files: Optional["Files"] = None, out=None, pusher: Optional[Pusher] = None):
        self.root = root.target
        self.pusher = pusher                             # --push: its tap goes to each new file's writer
        self.writer = writer
        self.opts = opts
        self.header = header or {}
        self.files = files
        self.out = out                                   # the file being written
        self.file_start = time.monotonic()
        self.hub: Optional[EbpfHub] = EbpfHub(opts.ebpf_max_rate) if opts.ebpf else None
        self.procs: Dict[int, ProcessRecording] = {}    # pid -> its recording, while it runs
        self.by_proc: List[ProcessRecording] = []       # every recording not yet counted in a closed file
        self.next_proc = 0
        self.gone: dict = {n: {"iseqs": 0, "methods": 0} for n in ("unnamed", "renamed")}   # the summed counts of recordings let go
        self.error: Optional[TraceWriteError] = None
        self.crashes: list = []                          # (pid, exception) of recordings let go (rotation)
        self.interrupted = False
        self.start_ns = writer.start_mono_ns
        self._lock = threading.Lock()
        self._last_titles = time.monotonic()
        self.children = Children(root.target, opts) if opts.children else None
        if opts.children:
            _sampler.prepare_thread(realtime_sampling(opts.rate_hz))     # a sampler thread waits
        self._add(root, parent=-1, from_start=opts.from_start)

    # ------------------------------------------------------------------ processes
    def _add(self, ready: ReadyProcess, parent: int, from_start: bool) -> ProcessRecording:
        target = ready.target
        proc = self.next_proc
        self.next_proc += 1
        opts = replace(self.opts, from_start=from_start)
        pr = ProcessRecording(self, proc, ready, opts)
        self.by_proc.append(pr)
        self.procs[target.pid] = pr
        with self.writer_lock():
            self.writer.process(proc, pid=target.pid, ppid=parent_of(target.pid) or 0, parent=parent,
                                command=target.command, at_ns=_sampler.monotonic_ns(), ns_pid=target.ns_pid,
                                ruby=target.info["ruby"], ruby_description=target.info["ruby_description"],
                                layout=target.info["layout"], service=target.service)
        return pr

    def ended(self, pr: ProcessRecording) -> None:
        """A process's recording is over (its thread's last act): its pid may be recorded again (a new
        process that got it), its pidfd closed."""
        with self._lock:
            if self.procs.get(pr.target.pid) is pr:
                del self.procs[pr.target.pid]
        if pr.proc != 0:
            forget(pr.target.pid)
            pr.release()

    def writer_lock(self):
        return self.writer.lock

    def start(self) -> None:
        self.by_proc[0].thread.start()
        if self.opts.children:
            self.scan()

    def running(self) -> bool:
        return self.by_proc[0].thread.is_alive() and self.error is None

    def failed(self, e: TraceWriteError) -> None:
        with self._lock:
            if self.error is None:
                self.error = e
        for pr in self.by_proc:
            pr.stop()

    def interrupt(self) -> None:
        """Ctrl-C, SIGTERM: the root's recording ends, and with it the others' (finish)."""
        self.interrupted = True
        self.by_proc[0].session.interrupt()

    def step(self) -> None:
        """Wait for a registry to appear (or the next look), then look at the tree."""
        children = self.children
        timeout = STATUS_INTERVAL_S if children is None else min(STATUS_INTERVAL_S, children.timeout())
        root_pidfd = self.by_proc[0].session.waiter.fds
        select_fds((children.fds() if children is not None else []) + root_pidfd, timeout)
        now = time.monotonic()
        if self.rotation_due(now):
            self.rotate()
        if children is None:
            return
        if children.due():
            self.scan()
        if now - self._last_titles >= TITLE_S:
            self._last_titles = now
            self.titles()

    def scan(self) -> None:
        """Start recording every descendant of the root that runs the gem and is not recorded yet."""
        if not self.by_proc[0].thread.is_alive() and self.by_proc[0].thread.ident is not None:
            return
        for ready in self.children.scan(self.procs, self._active):
            self._follow(ready)

    def _active(self) -> int:
        return sum(1 for pr in self.by_proc if pr.thread.is_alive())

    def _follow(self, ready: ReadyProcess) -> None:
        """A descendant found ready: a process of the trace from now on, its sampling started at once."""
        target = ready.target
        parent = self._recorded_parent(target.pid)
        born_since = target.info["created_mono_ns"] >= self.start_ns
        pr = self._add(ready, parent, from_start=born_since or self.opts.from_start)
        # its first tick now, by the sampler thread parked for it, before its recording's thread
        # exists (on a loaded machine a new child's first 0.7 s was lost while a Python thread was made)
        try:
            pr.session.start_sampling()
        except OSError:
            pass                        # its recording's thread tries again, and says why if it fails
        pr.thread.start()

    def _recorded_parent(self, pid: int) -> int:
        """The proc of the nearest recorded ancestor of pid (-1: none)."""
        p = parent_of(pid)
        for _ in range(64):
            if p is None or p <= 1:
                return -1
            pr = self.procs.get(p)
            if pr is not None:
                return pr.proc
            p = parent_of(p)
        return -1

    def titles(self) -> None:
        """A process that changed its title (puma's workers do, after the fork) gets a new
        `process` record."""
        for pr in self.by_proc:
            if not pr.thread.is_alive():
                continue
            title = command_line(pr.target.pid)
            if title and title != pr.title:
                pr.title = title
                with self.writer_lock():
                    self.writer.process(pr.proc, pid=pr.target.pid, ppid=parent_of(pr.target.pid) or 0,
                                        parent=self._recorded_parent(pr.target.pid), command=title,
                                        at_ns=_sampler.monotonic_ns(), ns_pid=pr.target.ns_pid,
                                        ruby=pr.target.info["ruby"],
                                        ruby_description=pr.target.info["ruby_description"],
                                        layout=pr.target.info["layout"], service=pr.target.service)

    # ------------------------------------------------------------------ rotation
    def rotation_due(self, now: float) -> bool:
        o = self.opts
        return bool((o.rotate_s and now - self.file_start >= o.rotate_s)
                    or (o.rotate_bytes and self.writer.written >= o.rotate_bytes))

    def rotate(self) -> None:
        """Close this trace file and go on in the next: every process switches at a moment of its own
        (its sampler starts over: no sample is lost or written twice); the old file gets its end
        record with its own counts and, closed, goes to the on_closed hook; files beyond opts.keep
        are removed."""
        if not self.by_proc[0].thread.is_alive():
            return
        old_path = self.files.current
        path = self.files.next()
        out = open_output(path)
        at_ns = _sampler.monotonic_ns()
        writer = TraceWriter(out, {**self.header, "start_mono_ns": at_ns, "start_wall_ns": _sampler.wall_ns()},
                             batched=True, tap=self.pusher.tap.for_writer() if self.pusher is not None else None)
        live = [pr for pr in self.by_proc if pr.thread.is_alive()]
        for pr in live:
            self._process_record(writer, pr, pr.title)
        writer.flush()
        for pr in live:
            pr.rotate(writer)
        for pr in live:
            while not pr.switched.wait(0.1):
                if not pr.thread.is_alive():
                    break
        old, old_out = self.writer, self.out
        with old.lock:
            self.writer, self.out = writer, out
        # the old file's counts: each process's at its cut (at its end, if it ended first), less its base
        at_cut = {pr.proc: (pr.cut_counts if pr.switched.is_set() else pr.counts) for pr in live}
        for pr in self.by_proc:
            if pr.proc not in at_cut and pr.counts is not None and pr.base is not pr.counts:
                at_cut[pr.proc] = pr.counts         # ended in this file, before the rotation
        old.end(**file_counts(self.by_proc, self.counts(final=False), at_ns, reason="rotated", at_cut=at_cut))
        for pr in self.by_proc:
            if pr.proc in at_cut and at_cut[pr.proc] is not None:
                pr.base = at_cut[pr.proc]
        # the recordings that ended and are counted in the closed file are let go (the totals keep them)
        done = [pr for pr in self.by_proc[1:] if pr.counts is not None and pr.base is pr.counts]
        for pr in done:
            self.by_proc.remove(pr)
            if pr.crash is not None:
                self.crashes.append((pr.target.pid, pr.crash))
        self.gone = summed(self.gone, [pr.counts for pr in done])
        old_out.close()
        self.file_start = time.monotonic()
        self.files.finished(old_path)

    def _process_record(self, writer: TraceWriter, pr: ProcessRecording, command: list) -> None:
        t = pr.target
        with writer.lock:
            writer.process(pr.proc, pid=t.pid, ppid=parent_of(t.pid) or 0, parent=self._recorded_parent(t.pid),
                           command=command, at_ns=_sampler.monotonic_ns(), ns_pid=t.ns_pid, ruby=t.info["ruby"],
                           ruby_description=t.info["ruby_description"], layout=t.info["layout"],
                           service=t.service)

    # ------------------------------------------------------------------ the end
    def finish(self) -> None:
        """The root's recording ended: every other process's ends now, each drained and closed."""
        for pr in self.by_proc[1:]:
            pr.stop()
        for pr in self.by_proc:
            pr.thread.join()
        if self.hub is not None:
            self.ebpf_summary = self.hub.symbolizer.summary() if self.hub.symbolizer is not None else None
            self.hub.close()
        if self.children is not None:
            self.children.close()

    def abort(self) -> None:
        for pr in self.by_proc:
            if pr.session.sampler is not None:
                pr.session.abort()
        if self.hub is not None:
            self.hub.close()

    def crash(self):
        """(pid, exception) of the first process whose recording a defect of sdb's ended, or None."""
        if self.crashes:
            return self.crashes[0]
        return next(((pr.target.pid, pr.crash) for pr in self.by_proc if pr.crash is not None), None)

    @property
    def stalled(self) -> bool:
        return any(pr.session.stalled for pr in self.by_proc)

    def counts(self, final: bool = True) -> dict:
        """The end record: process 0's counts, with the ones that add up summed over the processes
        (final: each recording is over; else their counts so far)."""
        def of(pr):
            return pr.counts if final or pr.counts is not None else pr.session.counts()
        root = self.by_proc[0]
        others = [of(pr) for pr in self.by_proc[1:] if final is False or pr.counts is not None]
        c = summed(of(root), [*others, self.gone])
        c["processes"] = self.next_proc
        c["processes_left_out"] = self.children.left_out if self.children is not None else 0
        c["processes_too_short"] = self.children.too_short if self.children is not None else 0
        if final and getattr(self, "ebpf_summary", None) is not None:
            c["ebpf"] = self.ebpf_summary
        if self.interrupted:
            c["reason"] = "interrupted"
        return c

    def live_stats(self) -> List[dict]:
        """Each recorded process's sampler stats now (status line)."""
        return [pr.stats() for pr in self.by_proc if pr.thread.ident is not None]


def select_fds(fds: List[int], timeout: float) -> List[int]:
    import select
    if not fds:
        time.sleep(timeout)
        return []
    try:
        return select.select(fds, [], [], timeout)[0]
    except (OSError, ValueError):
        time.sleep(timeout)
        return []
