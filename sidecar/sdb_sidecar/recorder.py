"""Recording into a trace file (attach, record): a Session whose Drainer writes the trace, the
signals that end it, one status line, and the end record with the closing counts."""
from __future__ import annotations

import os
import signal
import socket
import sys
import time
from typing import IO, Optional

from sdb_trace import TraceWriteError, TraceWriter
from sdb_trace.output import open_output as open_safely

from . import __version__, _sampler
from .drainer import Drainer
from .errors import Exit, SdbError
from .options import Options
from .session import STALL_GRACE_S, Session, new_sampler
from .target import Target, check_readable, permission_error

STATUS_INTERVAL_S = 0.5


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


def record(target: Target, out_path: str, opts: Options, status_stream=None, on_signal=None) -> dict:
    """Record into the trace at out_path until opts.duration_s (0: no limit), Ctrl-C/SIGTERM or the
    target's exit. on_signal(signum), if given, is also called for each SIGINT/SIGTERM (`record`
    forwards them). opts.ebpf: name new ISeqs at birth with the eBPF symbolizer when the machine
    allows it, pausing its creation probes while they fire more than opts.ebpf_max_rate times a
    second (0: never pause). Returns the closing counts."""
    status_stream = status_stream or sys.stderr
    out = open_output(out_path)
    sampler = new_sampler(target, opts)
    try:
        check_readable(target.pid, target.registry, sampler)
    except SdbError:
        out.close()
        os.unlink(out_path)
        raise
    writer = TraceWriter(out, {
        "pid": target.pid, "ruby": target.info["ruby"], "ruby_description": target.info["ruby_description"],
        "layout": target.info["layout"], "rate_hz": opts.rate_hz, "start_mono_ns": _sampler.monotonic_ns(),
        "start_wall_ns": _sampler.wall_ns(), "hostname": socket.gethostname(), "sdb_version": __version__,
        "command": target.command, "max_depth": opts.max_depth,
    }, batched=True)
    session = Session(target, sampler, writer, opts)

    def on_stop_signal(signum, frame):
        session.interrupt()
        if on_signal is not None:
            on_signal(signum)

    old = {s: signal.signal(s, on_stop_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    status = StatusLine(status_stream, opts.quiet, opts.rate_hz, session.drainer)
    session.start()
    try:
        while session.running():
            status.update(session.step())
        session.drain_last()
    except BaseException as e:
        # the sampler thread runs without the GIL: it must be stopped before this exception can
        # reach the interpreter's exit
        session.abort()
        for s, h in old.items():
            signal.signal(s, h)
        if isinstance(e, TraceWriteError):
            raise write_failed(out_path, writer, e) from None
        raise
    finally:
        session.close()
    if session.stalled:
        d = opts.duration_s
        sys.stderr.write(f"sdb: warning: the sampler thread did not stop {d + 2 * STALL_GRACE_S:.0f} s "
                         f"into a {d:g} s recording; the trace holds what it gathered\n")
    counts = session.counts()
    writer.end(**counts)
    out.close()
    # our handlers stay until the end record is written: a Ctrl-C while closing only marks it interrupted
    for s, h in old.items():
        signal.signal(s, h)
    status.finish(sampler.stats())
    if counts["reason"] == "permission":
        raise permission_error(target.pid, PermissionError(1, "Operation not permitted"))
    return counts


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
