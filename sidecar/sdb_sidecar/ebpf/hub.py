"""The eBPF programs of a recording, shared by every process it records: the hub compiles them beside
the sampling and attaches them for each process's recording that joins (recording.session.Session,
which it sees as a `Member`)."""
from __future__ import annotations

import sys
import threading
from typing import Any, Optional, Protocol

from ..sampler import _sampler
from ..target.process import exiting
from . import bpfload, incontext
from .bpfload import EbpfUnavailable
from .governor import DEFAULT_MAX_RATE
from .incontext import InContext
from .kview import KernelView
from .symbolizer import EbpfSymbolizer
from .view import EbpfView


class Member(Protocol):
    """What the hub reads of a process's recording (a Session), and the fields it sets as each
    program is attached for it."""
    target: Any                     # target.Target: pid, ns_pid, registry, registry_ino
    sampler: Any                    # _sampler.Sampler
    opts: Any                       # recording.options.Options: in_context, rate_hz
    drainer: Any                    # recording.drainer.Drainer: ebpf, kernel_view_ns
    thread: threading.Thread        # the sampler's
    symbolizer: Optional[EbpfView]
    kernel_view: Optional[KernelView]
    in_context: Optional[InContext]
    in_context_since_ns: int


class EbpfHub:
    """The eBPF programs of a recording: one ISeq symbolizer and, on Ruby 3.1, one kernel view,
    shared by every process recorded (a process tree runs one Ruby). They are compiled beside the
    sampling, which starts at once (bcc's compile takes a second or more, several on a busy
    machine), in a thread of their own, for the first process that joins; each process that joins
    is attached as soon as they are in (EbpfSymbolizer.add, KernelView.add). ISeqs born before a
    process's probes are in are named by remote reads, as those alive before the recording are; on
    Ruby 3.1 procfs tells its sampler which threads ran until its view comes."""

    @staticmethod
    def compiling() -> bool:
        """A hub's thread (or incontext.prepare's) still runs (compiling or attaching) in this process."""
        return bpfload.compiling()

    def __init__(self, max_rate: float = DEFAULT_MAX_RATE):
        self.max_rate = max_rate
        self.symbolizer: Optional[EbpfSymbolizer] = None
        self.kernel_view: Optional[KernelView] = None
        self.in_context: Optional[InContext] = None
        self._lock = threading.Lock()
        self._sessions: list = []       # joined, attached when the programs are in
        self._thread: Optional[threading.Thread] = None
        self._sym_done = False          # the symbolizer's compile is over (whatever it got)
        self._done = False              # the compiling thread is over (whatever it got)
        self._ctx_done = False          # the in-context reads' compile is over (whatever it got)
        self._closed = False
        self._told = False              # the notice that eBPF is missing was printed

    def join(self, session: Member) -> None:
        with self._lock:
            if self._closed:
                return
            self._sessions.append(session)
            if self._thread is None:
                self._thread = threading.Thread(target=self._compile, args=(session,), name="sdb-ebpf-start",
                                                daemon=True)
                bpfload.COMPILE_THREADS.append(self._thread)
                self._thread.start()
                return
            sym_ready, kv_ready, ctx_ready = self._sym_done, self._done, self._ctx_done
        if sym_ready:
            self._attach_symbolizer(session)
        if kv_ready:
            self._attach_kernel_view(session)
        if ctx_ready:
            self._attach_in_context(session)

    def _compile(self, first: Member) -> None:
        """The in-context reads first (compiled already when `record` prepared them), then the
        symbolizer, then (Ruby 3.1) the kernel view, each attached for every process joined so far
        once it is in. A process that joins later is attached as it joins."""
        target = first.target
        sym = kv = None
        self._compile_in_context(first)
        try:
            sym = EbpfSymbolizer(target.pid, target.registry.layout, self.max_rate,
                                 on_pause=first.sampler.forget_iseqs)
            sym.start()
        except Exception as e:      # the recording goes on without eBPF whatever happened here
            sym = None
            self._notice(first, str(e) if isinstance(e, EbpfUnavailable) else f"{e.__class__.__name__}: {e}")
        with self._lock:
            self._sym_done = True
            if self._closed:        # the recording ended while we compiled
                if sym is not None:
                    sym.close()
                self._done = True
                return
            self.symbolizer = sym
            sessions = list(self._sessions)
        for s in sessions:
            self._attach_symbolizer(s, first=s is first)
        if first.sampler.uses_thread_status:     # Ruby 3.1: the gem cannot say which threads ran
            try:
                kv = KernelView()
                kv.start()
            except EbpfUnavailable as e:
                kv = None
                if sym is not None and not exiting(target.pid):
                    sys.stderr.write(f"sdb: notice: no kernel view of the threads ({e}); the sampler asks "
                                     f"procfs\n")
            except Exception:
                kv = None           # procfs tells the sampler which threads ran, as before the view came
        self._publish("kernel_view", "_done", kv, self._attach_kernel_view)

    def _compile_in_context(self, first: Member) -> None:
        """The in-context reads (incontext.py; compiled already when `record` prepared them), unless
        opts say not to or there is no eBPF at all (the symbolizer's notice says why, once)."""
        ic = None
        try:
            bpfload.check_available()
            wanted = first.opts.in_context
        except EbpfUnavailable:
            wanted = False
        if wanted:
            try:
                ic = incontext.take(first.opts.rate_hz)
            except EbpfUnavailable as e:
                if not exiting(first.target.pid) and not self._closed:
                    sys.stderr.write(f"sdb: notice: no in-context reads ({e}); running threads' stacks are "
                                     f"copied from outside, and calls shorter than a copy lose samples to "
                                     f"their callers\n")
            except Exception:
                pass                # copied from outside, as before they came
        self._publish("in_context", "_ctx_done", ic, self._attach_in_context)

    def _publish(self, attr: str, done: str, program, attach) -> None:
        """A compile is over (flag `done`): its program (or None) becomes the hub's `attr` and is
        attached for every process joined so far (a later one is attached as it joins); one that
        came after the recording ended is closed."""
        with self._lock:
            setattr(self, done, True)
            if self._closed:
                if program is not None:
                    program.close()
                return
            setattr(self, attr, program)
            sessions = list(self._sessions)
        for s in sessions:
            attach(s)

    def _notice(self, session: Member, why: str) -> None:
        # a program that is over (or a recording that ended) needs no eBPF: nothing to say
        if not self._told and not self._closed and not exiting(session.target.pid):
            self._told = True
            sys.stderr.write(f"sdb: notice: no eBPF symbolizer ({why}); ISeqs are named by remote reads\n")

    def _attach_symbolizer(self, session: Member, first: bool = False) -> None:
        """The symbolizer for one more process (the first one's is attached by its start)."""
        target = session.target
        with self._lock:
            if self._closed or session not in self._sessions or self.symbolizer is None:
                return
            sym = self.symbolizer
        try:
            if not first:
                sym.add(target.pid, session.sampler.forget_iseqs)
        except EbpfUnavailable as e:
            if not exiting(target.pid):
                sys.stderr.write(f"sdb: notice: no eBPF symbolizer for process {target.pid} ({e}); its ISeqs "
                                 f"are named by remote reads\n")
            return
        view = EbpfView(sym, target.pid)
        session.symbolizer = view
        session.drainer.ebpf = view
        session.sampler.watch_ebpf_pause(sym.pause_word)

    def _attach_kernel_view(self, session: Member) -> None:
        """Ruby 3.1: the kernel view for one more process (keyed by our tids: a container's registry
        holds its own, so procfs tells its sampler)."""
        target = session.target
        with self._lock:
            if self._closed or session not in self._sessions or self.kernel_view is None:
                return
            kv = self.kernel_view
        if not session.sampler.uses_thread_status or target.ns_pid != target.pid:
            return
        try:
            kv.add(target.pid)
        except Exception:
            return
        session.sampler.use_kernel_view(kv.address, kv.slots)
        session.kernel_view = kv
        session.drainer.kernel_view_ns = _sampler.monotonic_ns()

    def _attach_in_context(self, session: Member) -> None:
        """In-context reads for one more process (keyed by our tids: not for a container's)."""
        target = session.target
        with self._lock:
            if self._closed or session not in self._sessions or self.in_context is None:
                return
            ic = self.in_context
        if target.ns_pid != target.pid or session.in_context is ic:
            return
        try:
            ic.add(target.pid, target.registry.layout,
                   incontext.mapped_at(target.pid, target.registry_ino, target.registry.gc_active_offset)
                   if target.registry_ino else 0)
        except Exception:
            return
        session.sampler.use_in_context(ic.address, ic.slots)
        session.in_context = ic
        session.in_context_since_ns = _sampler.monotonic_ns()
        # the timers on the threads there now; the drain loop follows those that come and go
        ic.follow(target.pid, [t["tid"] for t in target.registry.threads()])

    def leave(self, session: Member) -> None:
        """One process's recording is over: its probes out (the kernel view stays mapped for a
        sampler thread that did not stop: it goes with our exit)."""
        with self._lock:
            if session in self._sessions:
                self._sessions.remove(session)
            sym, kv, ic = self.symbolizer, self.kernel_view, self.in_context
        pid = session.target.pid
        if ic is not None and session.in_context is ic:
            ic.remove(pid)
            if not session.thread.is_alive():
                session.sampler.use_in_context(0, 0)
        if sym is not None and pid in sym.targets and pid != sym.pid:
            sym.remove(pid)
        if kv is not None and session.kernel_view is kv:
            kv.remove(pid)
            if not session.thread.is_alive():
                session.sampler.use_kernel_view(0, 0)

    def close(self) -> None:
        """Every program detached; one still compiling is closed as soon as it is done."""
        with self._lock:
            self._closed = True
            sym, kv, ic = self.symbolizer, self.kernel_view, self.in_context
            self.symbolizer = self.kernel_view = self.in_context = None
            alive = any(s.thread.is_alive() for s in self._sessions)
        if sym is not None:
            sym.close()
        if ic is not None and not alive:   # a stalled sampler thread may still read it
            ic.close()
        if kv is not None and not alive:   # a stalled sampler thread may still read it
            kv.close()
