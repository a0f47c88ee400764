"""Recording: run the sampler in a thread of its own (no GIL), drain it into the trace
(every half second, or within 20 ms when something new must be named), name new
ISeqs, print one status line."""
from __future__ import annotations

import os
import select
import signal
import socket
import sys
import threading
import time
from typing import IO, Optional

from sdb_trace import TraceWriteError, TraceWriter
from sdb_trace.output import open_output as open_safely

from . import __version__, _leftright, _sampler
from .ebpf import DEFAULT_MAX_RATE, EbpfSymbolizer, EbpfUnavailable
from .kview import KernelView
from .errors import Exit, SdbError
from .symbols import RemoteReadError, RemoteRuby
from .target import Target, check_readable, permission_error
from .wakeup import Wakeup

DRAIN_INTERVAL_S = 0.1        # the shortest gap between two drains (and top's refresh) ...
NAMING_INTERVAL_S = 0.02      # ... but for one that names what a sample showed first: read it while it holds
DRAIN_MAX_S = 0.5             # the longest: a drain wakes the Python thread, ~250 us of CPU here
STATUS_INTERVAL_S = 0.5
STALL_GRACE_S = 3.0


# the name of a sampled ISeq that was gone before it could be read (without eBPF to name it at birth)
UNKNOWN_ISEQ = {"label": "(unknown)", "base_label": "(unknown)", "path": "", "realpath": None, "first_line": 0,
                "type": -1}


class Drainer:
    """Turns what the sampler gathered into trace records, and names the ISeqs it saw first.

    A name must hold for every sample that uses it. The sampler hands over each ISeq address it
    saw first with `lo`, the earliest moment that sample's frames may have been copied, and the
    instructions' address it saw there. With eBPF attached, every ISeq born has a record by the
    time the Drainer looks (`EbpfSymbolizer.sync`): one born at the address at or before `lo`,
    with those instructions, names it, no read needed; otherwise it is read from the target now,
    and that name holds back to `lo` only if no ISeq was born at the address in between (eBPF
    attached all that time says so); if one was, the read named its successor and the sample's
    ISeq is `(unknown)`. Without eBPF (or across one of its pauses) births are not seen: a read
    that finds other instructions at the address names nothing; one that finds the same is taken
    (`unproven` counts those)."""

    BIRTHS_KEPT = 4     # per address: enough for the births since any pending read's `lo`

    def __init__(self, target: Target, sampler: "_sampler.Sampler", writer: TraceWriter,
                 ebpf: Optional[EbpfSymbolizer] = None):
        self.target = target
        self.sampler = sampler
        self.writer = writer
        self.remote = RemoteRuby(sampler, target.registry.layout)
        self.symbol_errors = 0      # names that could not be read (the ISeq or method entry was gone)
        self.superseded = 0         # remote reads that found a successor born since the sample
        self.unproven = 0           # remote names taken without eBPF's proof that nothing was born between
        self.unnamed_iseqs = 0      # ISeqs written as (unknown): gone, replaced, or superseded before the read
        self.unnamed_methods = 0    # method entries written without a name
        self.ebpf = ebpf            # set once the eBPF symbolizer is attached (EbpfStarter)
        self.names: dict = {}       # addr -> (the name last written for it, its at_ns): a GC move carries it
        self.births: dict = {}      # addr -> [(at_ns, name or None, instructions)], eBPF births, oldest first
        self.to_read: list = []     # [(addr, lo_ns, instructions)]: ISeqs to name by reading the target
        self.ebpf_announced = False     # the trace's ebpf_attached record is written

    def write_iseq(self, addr: int, at_ns: int, source: str, info: dict, **extra) -> None:
        self.remote.forget(addr)    # a new ISeq here: cached facts about the address are stale
        self.names[addr] = (info, at_ns)
        self.writer.iseq(addr, at_ns=at_ns, source=source, **info, **extra)

    def name_holds(self, addr: int, at_ns: int) -> bool:
        """The name last written for addr still holds at at_ns: written while the eBPF creation
        probes were attached, and they stayed attached until at_ns (no ISeq was born there unseen)."""
        prev = self.names.get(addr)
        return prev is not None and self.ebpf is not None and self.ebpf.attached_throughout(prev[1], at_ns)

    def _born(self, addr: int, at_ns: int, info: Optional[dict], encoded: int) -> None:
        b = self.births.setdefault(addr, [])
        b.append((at_ns, info, encoded))
        if len(b) > 1 and b[-2][0] > at_ns:
            b.sort(key=lambda x: x[0])
        del b[:-self.BIRTHS_KEPT]

    def named_at_birth(self, addr: int, lo: int, encoded: int) -> bool:
        """eBPF named the ISeq at addr that a sample showed (copied at lo or later) at its birth: the
        last birth there at or before lo has a name, these instructions, and no birth came unseen
        from it to lo."""
        ebpf = self.ebpf
        if ebpf is None:
            return False
        births = self.births.get(addr)
        if not births:
            return False
        last = None
        for b in births:
            if b[0] <= lo:
                last = b
        return (last is not None and last[1] is not None and (not encoded or not last[2] or last[2] == encoded)
                and ebpf.attached_throughout(last[0], lo))

    def born_between(self, addr: int, lo: int, hi: int) -> bool:
        return any(lo < b[0] <= hi for b in self.births.get(addr, ()))

    def sync_ebpf(self) -> None:
        """Every eBPF record written until now, into the trace."""
        if self.ebpf is not None:
            self.ebpf.sync()
            self.drain_ebpf()

    def name_remotely(self) -> None:
        """Name the ISeqs in to_read by reading them (see the class's docstring)."""
        reads, self.to_read = self.to_read, []
        done = []
        for addr, lo, encoded in reads:
            if self.named_at_birth(addr, lo, encoded):
                continue
            self.remote.forget(addr)
            try:
                if encoded and self.remote.u64(self.remote.iseq_body(addr) + self.remote.L["body_iseq_encoded"],
                                               "ISeq instructions") != encoded:
                    raise RemoteReadError(f"ISeq 0x{addr:x} was replaced before it was read")
                info = self.remote.iseq_info(addr)
            except RemoteReadError:
                self.symbol_errors += 1
                info = None
            done.append((addr, lo, info, _sampler.monotonic_ns()))
        if not done:
            return
        self.sync_ebpf()        # births until after the reads
        for addr, lo, info, read_ns in done:
            if info is not None:
                if self.ebpf is not None and self.ebpf.attached_throughout(lo, read_ns):
                    if self.born_between(addr, lo, read_ns):
                        self.superseded += 1
                        info = None
                else:
                    self.unproven += 1
            if info is None:
                self.unnamed_iseqs += 1
            self.write_iseq(addr, lo, "remote", info if info is not None else UNKNOWN_ISEQ)

    def drain_ebpf(self) -> None:
        """ISeqs named at birth by eBPF (source "ebpf", the event's time); moves keep a name."""
        for ev in self.ebpf.take():
            kind, addr = ev["kind"], ev.get("addr")
            if kind == "new":
                info = {k: ev[k] for k in ("label", "base_label", "path", "realpath", "first_line", "type")}
                self._born(addr, ev["at_ns"], info, ev["encoded"])
                self.write_iseq(addr, ev["at_ns"], "ebpf", info)
            elif kind == "remote":      # a string longer than the probe copies: read it here
                self._born(addr, ev["at_ns"], None, ev["encoded"])
                self.to_read.append((addr, ev["at_ns"], ev["encoded"]))
            elif kind == "move":
                self._born(addr, ev["at_ns"], None, 0)
                if self.name_holds(ev["from"], ev["at_ns"]):
                    self.write_iseq(addr, ev["at_ns"], "move", self.names[ev["from"]][0], moved_from=ev["from"])
                elif addr in self.names:
                    # an ISeq whose name is unknown here (or uncertain: a pause came between) took
                    # the place of a named one: read remotely when sampled
                    self.write_iseq(addr, ev["at_ns"], "move", UNKNOWN_ISEQ, moved_from=ev["from"])
            elif kind == "pause":
                self.writer.ebpf_pause(ev["at_ns"], rate=ev["rate"], backoff_s=ev["backoff_s"])
            elif kind == "resume":
                self.writer.ebpf_resume(ev["at_ns"])

    def drain(self) -> dict:
        d = self.sampler.drain(encode_samples=True)
        w = self.writer
        if self.ebpf is not None and not self.ebpf_announced:
            self.ebpf_announced = True
            w.ebpf_attached(self.ebpf.attached_ns, self.ebpf.attach_kind)
        self.sync_ebpf()        # every ISeq the samples above show was born before this
        for ev in d["threads"]:
            if not ev["ended"]:
                w.thread(ev["serial"], ev["tid"], ev["name"], ev["start_ns"], ev["flags"], ev["at_ns"])
        for (addr, lo), encoded in zip(d["new_iseqs"], d["new_iseq_encoded"]):
            self.to_read.append((addr, lo, encoded))
        self.name_remotely()
        for me, at_ns in d["new_mes"]:
            try:
                m = self.remote.method_info(me)
            except RemoteReadError:
                self.symbol_errors += 1
                m = {"name": None, "type": -1, "class_path": None, "singleton": False}
            if m["name"] is None:
                self.unnamed_methods += 1
            w.method(me, at_ns=at_ns, source="remote", **m)
        if d["frame_kind"]:
            lines = [self.remote.line(i, pc) if k == 0 else 0
                     for k, i, pc in zip(d["frame_kind"], d["frame_iseq"], d["frame_pc"])]
            w.frames(d["first_frame"], d["frame_kind"], d["frame_iseq"], d["frame_pc"], d["frame_me"], lines)
        if d["stacks"]:
            w.stacks(d["first_stack"], d["stacks"])
        if d["samples_record"] is not None:
            w.encoded(d["samples_record"])
        for ev in d["threads"]:
            if ev["ended"]:
                w.thread_end(ev["serial"], ev["at_ns"])
        w.flush()
        return d


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


def start_ebpf(target: Target, max_rate: float = DEFAULT_MAX_RATE) -> EbpfSymbolizer:
    """The eBPF symbolizer for this target, attached (EbpfUnavailable says why not). The sampler
    uses its names once given `sym.named` (EbpfStarter)."""
    sym = EbpfSymbolizer(target.pid, target.registry.layout, _leftright.LeftRightMap(4096), max_rate)
    sym.start()
    return sym


class EbpfStarter:
    """Compiles and attaches the eBPF programs beside the sampling, which starts at once (bcc's
    compile takes a second or more, several on a busy machine): ISeqs born before the probes are in
    are named by remote reads, as those alive before the recording are. On Ruby 3.1 the kernel
    view comes with them; procfs tells the sampler which threads ran until then."""

    _threads: list = []     # every starter's thread (compiling() asks if one still runs)

    @classmethod
    def compiling(cls) -> bool:
        """A starter thread still runs (compiling or attaching) in this process."""
        return any(t.is_alive() for t in cls._threads)

    def __init__(self, target: Target, sampler: "_sampler.Sampler", drainer: Drainer, max_rate: float):
        self.target, self.sampler, self.drainer, self.max_rate = target, sampler, drainer, max_rate
        self.symbolizer: Optional[EbpfSymbolizer] = None
        self.kernel_view: Optional[KernelView] = None
        self._lock = threading.Lock()
        self._cancelled = False
        self._thread = threading.Thread(target=self._start, name="sdb-ebpf-start", daemon=True)
        EbpfStarter._threads.append(self._thread)
        self._thread.start()

    def _start(self) -> None:
        sym = kv = None
        try:
            sym = start_ebpf(self.target, self.max_rate)
        except Exception as e:      # the recording goes on without eBPF whatever happened here
            why = str(e) if isinstance(e, EbpfUnavailable) else f"{e.__class__.__name__}: {e}"
            with self._lock:
                # a program that is over (or a recording that ended) needs no eBPF: nothing to say
                if not self._cancelled and not _exiting(self.target.pid):
                    sys.stderr.write(f"sdb: notice: no eBPF symbolizer ({why}); ISeqs are named by remote reads\n")
        try:
            kv = start_kernel_view(self.target, self.sampler, notice=sym is not None and not _exiting(self.target.pid))
        except Exception:
            kv = None       # procfs tells the sampler which threads ran, as before the view came
        with self._lock:
            if self._cancelled:     # the recording ended while we compiled
                if sym is not None:
                    sym.close()
                stop_kernel_view(self.sampler, kv)
                return
            self.kernel_view = kv
            if sym is not None:
                self.sampler.use_named(sym.named)
                self.symbolizer = sym
                self.drainer.ebpf = sym

    def finish(self) -> None:
        """The recording is over: what is attached stays for the final drain (the caller closes it);
        what is still being compiled is closed as soon as it is done."""
        with self._lock:
            self._cancelled = True


def start_kernel_view(target: Target, sampler: "_sampler.Sampler", notice: bool) -> Optional[KernelView]:
    """Ruby 3.1: the kernel view of the target's threads (kview.py) for the sampler, or None (with
    one notice if `notice`: when eBPF itself is missing, the symbolizer's notice said so)."""
    if not sampler.uses_thread_status:
        return None                     # Ruby >= 3.2: the gem's GVL hooks tell the sampler
    kv = KernelView(target.pid)
    try:
        kv.start()
    except EbpfUnavailable as e:
        if notice:
            sys.stderr.write(f"sdb: notice: no kernel view of the threads ({e}); the sampler asks procfs\n")
        return None
    sampler.use_kernel_view(kv.address, kv.slots)
    return kv


def stop_kernel_view(sampler: "_sampler.Sampler", kv: Optional[KernelView], sampler_thread=None) -> None:
    """Unmap the kernel view once the sampler can no longer read it (a stalled sampler thread keeps
    it: the process's exit takes it away)."""
    if kv is None or (sampler_thread is not None and sampler_thread.is_alive()):
        return
    sampler.use_kernel_view(0, 0)
    kv.close()


def threads_from(sampler: "_sampler.Sampler", kv: Optional[KernelView]) -> str:
    """What told the sampler which threads ran: the gem (Ruby >= 3.2), the kernel view, or procfs."""
    if not sampler.uses_thread_status:
        return "gem"
    return "kernel_view" if kv is not None else "procfs"


def record(target: Target, out_path: str, rate_hz: float, duration_s: float, quiet: bool,
           max_depth: int = 2048, status_stream=None, on_signal=None, ebpf: bool = True,
           ebpf_max_rate: float = DEFAULT_MAX_RATE) -> dict:
    """Record until duration_s (0: no limit), Ctrl-C/SIGTERM or the target's exit.
    on_signal(signum), if given, is also called for each SIGINT/SIGTERM (`record` forwards them).
    ebpf: name new ISeqs at birth with the eBPF symbolizer when the machine allows it, pausing its
    creation probes while they fire more than ebpf_max_rate times a second (0: never pause).
    Returns the closing counts."""
    status_stream = status_stream or sys.stderr
    out = open_output(out_path)
    sampler = _sampler.Sampler(target.registry, target.pid, rate_hz, max_depth)
    try:
        check_readable(target.pid, target.registry, sampler)
    except SdbError:
        out.close()
        os.unlink(out_path)
        raise
    writer = TraceWriter(out, {
        "pid": target.pid, "ruby": target.info["ruby"], "ruby_description": target.info["ruby_description"],
        "layout": target.info["layout"], "rate_hz": rate_hz, "start_mono_ns": _sampler.monotonic_ns(),
        "start_wall_ns": _sampler.wall_ns(), "hostname": socket.gethostname(), "sdb_version": __version__,
        "command": target.command, "max_depth": max_depth,
    }, batched=True)
    drainer = Drainer(target, sampler, writer)
    result = []

    def sample():
        try:
            result.append(sampler.run(duration_s))
        finally:
            waiter.sampler_ended()

    thread = threading.Thread(target=sample, name="sdb-sampler", daemon=True)
    waiter = DrainWaiter(_pidfd(target.pid), thread)
    interrupted = []

    def on_stop_signal(signum, frame):
        interrupted.append(signum)
        sampler.stop()
        if on_signal is not None:
            on_signal(signum)

    old = {s: signal.signal(s, on_stop_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    status = StatusLine(status_stream, quiet, rate_hz, drainer)
    started = time.monotonic()
    stalled = False
    sampler.set_wake_fd(waiter.wakeup.fd)
    thread.start()
    # sampling first; eBPF is compiled and attached beside it
    starter = EbpfStarter(target, sampler, drainer, ebpf_max_rate) if ebpf else None
    symbolizer = kernel_view = None
    errors_seen, maps_checked = 0, 0.0
    execd = False
    try:
        while thread.is_alive():
            waiter.wait()
            drainer.drain()
            if not _alive(target.pid):
                sampler.stop()
            st = sampler.stats()
            if st["errors"] > errors_seen and time.monotonic() - maps_checked >= DRAIN_MAX_S:
                # reads failed outright: a thread ended mid-read, or the program exec'd another one
                # (same pid, none of the memory the registry points into): its registry is no
                # longer mapped then, and the recording ends. The maps of a large app take ~1 ms
                # to read: asked at most every DRAIN_MAX_S, however often threads end mid-read.
                errors_seen, maps_checked = st["errors"], time.monotonic()
                if not execd and execd_another(target.pid, target.registry_ino):
                    execd = True
                    sampler.stop()
            status.update(st)
            # a watchdog that needs nothing from the sampler thread: a recording never outlives its
            # duration by more than a few seconds, whatever happens to that thread
            if duration_s and time.monotonic() - started > duration_s + STALL_GRACE_S:
                sampler.stop()
                thread.join(STALL_GRACE_S)
                if thread.is_alive():
                    stalled = True
                    break
        if not stalled:
            drainer.drain()
    except BaseException as e:
        # the sampler thread runs without the GIL: it must be stopped before this exception can
        # reach the interpreter's exit
        sampler.stop()
        thread.join(STALL_GRACE_S)
        for s, h in old.items():
            signal.signal(s, h)
        if isinstance(e, TraceWriteError):
            raise write_failed(out_path, writer, e) from None
        raise
    finally:
        if starter is not None:
            starter.finish()
            symbolizer, kernel_view = starter.symbolizer, starter.kernel_view
        if symbolizer is not None:
            symbolizer.close()
            drainer.drain_ebpf()
            drainer.name_remotely()
        stop_kernel_view(sampler, kernel_view, thread)
        if not thread.is_alive():           # a stalled sampler thread may still write to it
            sampler.set_wake_fd(-1)
            waiter.wakeup.close()
    stats = sampler.stats()
    why = result[0] if result else "stopped"
    if stalled:
        why = "stalled"
        sys.stderr.write(f"sdb: warning: the sampler thread did not stop {duration_s + 2 * STALL_GRACE_S:.0f} s "
                         f"into a {duration_s:g} s recording; the trace holds what it gathered\n")
    if interrupted:
        why = "interrupted"
    elif execd:
        why = "target-exec"
    elif why == "stopped" or why == "target-exited":
        why = "target-exited" if not _alive(target.pid) else why
    counts = {"at_ns": _sampler.monotonic_ns(), "reason": why, "ticks": stats["ticks"], "late": stats["late"],
              "missed": stats["missed"], "samples": stats["samples"], "torn": stats["torn"], "retried": stats["retried"], "reused": stats["reused"],
              "errors": stats["errors"], "threads": stats["threads"], "symbol_errors": drainer.symbol_errors,
              "names_superseded": drainer.superseded, "names_unproven": drainer.unproven,
              "unnamed": {"iseqs": drainer.unnamed_iseqs, "methods": drainer.unnamed_methods},
              "ebpf": symbolizer.summary() if symbolizer is not None else None,
              "threads_from": threads_from(sampler, kernel_view)}
    writer.end(**counts)
    out.close()
    # our handlers stay until the end record is written: a Ctrl-C while closing only marks it interrupted
    for s, h in old.items():
        signal.signal(s, h)
    status.finish(stats)
    if why == "permission":
        raise permission_error(target.pid, PermissionError(1, "Operation not permitted"))
    return counts


class DrainWaiter:
    """When the recorder drains: DRAIN_MAX_S after the last drain, or sooner, though never less than
    NAMING_INTERVAL_S after it, when the sampler signals `wakeup` (something new to name: an ISeq must
    be read while it still holds), the target exits (its pidfd) or the sampler thread ends. In between
    the Python thread sleeps: in a steady recording it wakes twice a second."""

    def __init__(self, pidfd: int, thread: threading.Thread):
        self.wakeup = Wakeup()
        self.fds = [pidfd] if pidfd >= 0 else []
        self.thread = thread
        self.ended = False
        self.last = time.monotonic()

    def sampler_ended(self) -> None:
        """Called by the sampler thread as it ends: the loop drains once more without waiting."""
        self.ended = True
        self.wakeup.signal()

    def wait(self) -> None:
        timeout = self.last + DRAIN_MAX_S - time.monotonic()
        if self.ended:
            self.thread.join(DRAIN_INTERVAL_S)
        elif timeout > 0:
            if self.wakeup.wait(self.fds, timeout):
                # at most one drain per NAMING_INTERVAL_S: the ISeqs of a burst are named together
                gap = self.last + NAMING_INTERVAL_S - time.monotonic()
                if gap > 0:
                    self.thread.join(gap)
        self.last = time.monotonic()


_PIDFDS: dict = {}


def _pidfd(pid: int) -> int:
    """A pidfd for pid (readable once it has exited), kept open; -1 where the kernel has none
    (or it is gone)."""
    fd = _PIDFDS.get(pid)
    if fd is None:
        fd = -1
        if hasattr(os, "pidfd_open"):
            try:
                fd = os.pidfd_open(pid)
            except OSError:
                return -1               # gone, or no pidfds here (or not allowed): the slow way
        _PIDFDS[pid] = fd
    return fd


def execd_another(pid: int, ino: int) -> bool:
    """The process exec'd another program: its memory map, read whole, holds mappings but none of its
    registry file (inode `ino`), and the process is not on its way out. A process that is exiting
    (a signal, exit()) has its memory released before it becomes a zombie: its maps then read empty,
    which is no exec. The kernel shows a process's map whole or not at all (the reader holds the
    map), so a non-empty one without the registry is a new program's."""
    try:
        with open(f"/proc/{pid}/maps", "rb") as f:
            data = f.read()
    except OSError:
        return False                    # gone
    if not data:
        return False                    # exiting: no memory any more
    for line in data.splitlines():
        parts = line.split(None, 5)
        try:
            if len(parts) == 6 and parts[5].startswith(b"/dev/shm/sdb-") and int(parts[4]) == ino:
                return False
        except ValueError:
            continue
    return not _exiting(pid)


PF_EXITING = 0x4     # include/linux/sched.h: the task is in exit (its memory map may already be gone)


def _exiting(pid: int) -> bool:
    """The process is gone, a zombie, or on its way out (/proc/PID/stat's flags)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        fields = data[data.rindex(b")") + 2:].split()
        return fields[0] in (b"Z", b"X") or bool(int(fields[6]) & PF_EXITING)
    except (OSError, ValueError, IndexError):
        return True


def _alive(pid: int) -> bool:
    """The process still runs (not gone, not a zombie). Asked at every drain: through a pidfd
    (readable once the process has exited: one poll, ~1 us) where the kernel has them; else kill(0)
    and its state letter in /proc/PID/stat (~100 us with 8 threads: the kernel sums them all)."""
    fd = _pidfd(pid)
    if fd >= 0:
        return not select.select([fd], [], [], 0)[0]
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie still answers kill(): look at its state
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return data[data.rindex(b")") + 2:data.rindex(b")") + 3] != b"Z"
    except OSError:
        return False


class StatusLine:
    """One line on stderr, redrawn at most twice a second: threads, samples, rate, torn %, late %."""

    def __init__(self, stream, quiet: bool, rate_hz: float, drainer: Optional[Drainer] = None):
        self.stream = stream
        self.drainer = drainer
        self.quiet = quiet
        self.rate_hz = rate_hz
        self.last = 0.0
        self.tty = hasattr(stream, "isatty") and stream.isatty()

    def text(self, st: dict) -> str:
        elapsed = max(1e-9, (st["last_tick_ns"] - st["start_ns"]) / 1e9) if st["ticks"] > 1 else 0
        rate = (st["ticks"] - 1) / elapsed if elapsed else 0.0
        reads = st["samples"] + st["torn"]
        torn = 100.0 * st["torn"] / reads if reads else 0.0
        due = st["ticks"] + st["missed"]
        late = 100.0 * (st["late"] + st["missed"]) / due if due else 0.0
        text = (f"sdb: {st['threads']} threads, {st['samples']} samples, {rate:.0f} Hz "
                f"(asked {self.rate_hz:.0f}), torn {torn:.2f}%, late {late:.2f}%")
        unnamed = self.drainer.unnamed_iseqs + self.drainer.unnamed_methods if self.drainer is not None else 0
        if unnamed:
            text += f", unnamed {unnamed}"
        ebpf = self.drainer.ebpf if self.drainer is not None else None
        pauses = len(ebpf.pauses) if ebpf is not None else 0
        if pauses:
            text += (f", eBPF paused {pauses}x (ISeqs created > {ebpf.max_rate:g}/s"
                     f"{', now' if ebpf.paused else ''})")
        return text

    def update(self, st: dict) -> None:
        now = time.monotonic()
        if self.quiet or now - self.last < STATUS_INTERVAL_S or not self.tty:
            return
        self.last = now
        self.stream.write("\r\x1b[K" + self.text(st))
        self.stream.flush()

    def finish(self, st: dict) -> None:
        if self.quiet:
            return
        self.stream.write(("\r\x1b[K" if self.tty else "") + self.text(st) + "\n")
        self.stream.flush()
