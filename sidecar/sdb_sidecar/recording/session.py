"""A recording session of one process: the Sampler in a thread of its own (no GIL), the Drainer that
turns what it gathers into records for a writer (every half second, or within 20 ms when something
new must be named), the eBPF programs compiled and attached beside it, and the checks on the target
(exited, exec'd). `attach`/`record` (recorder.record: a trace file), `top` (a LiveProfile) and
`snapshot` (a MemoryTrace, one tick) all run one."""
from __future__ import annotations

import threading
import time
from typing import Optional

from sdb_trace import TraceWriter

from ..ebpf.hub import EbpfHub
from ..ebpf.incontext import InContext
from ..ebpf.kview import KernelView
from ..ebpf.view import EbpfView
from ..errors import Exit, SdbError
from ..sampler import _registry, _sampler
from ..sampler.wakeup import Wakeup
from ..target.process import alive, execd_another, pidfd
from ..target.target import Target, process_exists
from .drainer import Drainer
from .options import Options

DRAIN_INTERVAL_S = 0.1        # the shortest gap between two drains (and top's refresh) ...
NAMING_INTERVAL_S = 0.02      # ... but for one that names what a sample showed first: read it while it holds
DRAIN_MAX_S = 0.5             # the longest: a drain wakes the Python thread, ~250 us of CPU here
STALL_GRACE_S = 3.0


REALTIME_MAX_HZ = 2000.0      # above, the sampler keeps the normal scheduler (see realtime_sampling)


def realtime_sampling(rate_hz: float) -> bool:
    """Whether the sampler's thread runs SCHED_FIFO at the lowest real-time priority (created so by
    Sampler.start or _sampler.prepare_thread; allowed to root, or with CAP_SYS_NICE, else under the
    normal scheduler): at rates up to REALTIME_MAX_HZ. Under the normal scheduler a thread that wakes up (a Ruby thread back from IO
    or sleep) is often put on the CPU the sampler runs on and preempts it: the ticks it should have
    taken while that thread ran are late, and short bursts of work right after a wake-up go
    unsampled (1.6 ms of CPU after each 20 ms sleep: 23 samples for 152 ms on 2 CPUs; 153 with the
    sampler real-time, as with the two pinned to different CPUs). The sampler sleeps between
    ticks: at ~1% of a CPU it starves no one; at 10 kHz and more it can use most of a CPU, which no
    real-time thread should."""
    return rate_hz <= REALTIME_MAX_HZ


def new_sampler(target: Target, opts: Options) -> "_sampler.Sampler":
    """The sampler for this target, told where procfs lists its threads (a container's own procfs).
    Raises SdbError when the registry open_target checked is not one any more: the sampler takes
    its own copy of the header, and a fork child's file goes back to its parent, emptied, once the
    child is gone (the gem's spare registry: a descendant of a recorded tree caught in between
    ended the whole recording with a traceback)."""
    try:
        sampler = _sampler.Sampler(target.registry, target.pid, opts.rate_hz, opts.max_depth)
    except _registry.RegistryError as e:
        if not process_exists(target.pid):
            raise SdbError(f"process {target.pid} exited", Exit.NO_SUCH_PROCESS) from None
        raise SdbError(str(e), Exit.REGISTRY_FORMAT) from None
    sampler.use_task_dir(target.task_dir)
    return sampler


def threads_from(sampler: "_sampler.Sampler", kv: Optional[KernelView]) -> str:
    """What told the sampler which threads ran: the gem (Ruby >= 3.2), the kernel view, or procfs."""
    if not sampler.uses_thread_status:
        return "gem"
    return "kernel_view" if kv is not None else "procfs"


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


class Session:
    """One recording of one process, into `writer`:

        session = Session(target, sampler, writer, opts)
        session.start()
        while session.running():
            session.step()          # waits for the next drain, drains, checks the target
        session.close()             # the last drain, eBPF detached; then session.counts()

    `interrupt()` (a signal handler may call it) ends it early; `abort()` stops the sampler thread
    when an exception leaves the loop (it runs without the GIL and must not outlive the interpreter).
    `snapshot` runs none of the loop: `tick()` samples once, in the caller's thread."""

    def __init__(self, target: Target, sampler: "_sampler.Sampler", writer: TraceWriter, opts: Options,
                 hub: Optional[EbpfHub] = None):
        self.target, self.sampler, self.opts = target, sampler, opts
        self.drainer = Drainer(target, sampler, writer, from_start=opts.from_start)
        self.thread = threading.Thread(target=self._sample, name="sdb-sampler", daemon=True)
        self.waiter = DrainWaiter(pidfd(target.pid), self.thread)
        # the eBPF programs: a process tree's recording shares its hub; a lone process has its own
        self.own_hub = hub is None and opts.ebpf
        self.hub: Optional[EbpfHub] = EbpfHub(opts.ebpf_max_rate) if self.own_hub else hub
        self.symbolizer: Optional[EbpfView] = None      # set by the hub once attached
        self.kernel_view: Optional[KernelView] = None   # likewise (Ruby 3.1)
        self.in_context: Optional[InContext] = None     # likewise
        self.in_context_since_ns = 0                    # when its sampler began to take them
        self.result: list = []          # what sampler.run returned: why it ended
        self.interrupted = False
        self.execd = False
        self.stalled = False
        self.ended_ns = 0           # drain_last: when the recording ended
        self.started = 0.0
        self.sampling = False           # the sampler's native thread was started (start_sampling)
        self._errors_seen, self._maps_checked = 0, 0.0

    def _sample(self) -> None:
        """The Python side of the sampler's native thread: waits for it (without the GIL), keeps
        why it ended, and wakes the drain loop."""
        try:
            self.result.append(self.sampler.wait())
        finally:
            self.waiter.sampler_ended()

    def start_sampling(self) -> None:
        """The sampler ticks from now on, in a native thread (Sampler.start): the first tick waits
        for nothing in Python. Done by start() unless done before (a process tree's recording does
        it the moment it finds a process); once. OSError: no thread could be started."""
        if self.sampling:
            return
        self.started = time.monotonic()
        self.sampler.set_wake_fd(self.waiter.wakeup.fd)
        self.sampler.start(self.opts.duration_s, realtime_sampling(self.opts.rate_hz))
        self.sampling = True

    def start(self) -> None:
        """Sampling first; eBPF (opts.ebpf) is compiled and attached beside it."""
        self.start_sampling()
        self.thread.start()
        if self.hub is not None:
            self.hub.join(self)

    def tick(self) -> bool:
        """One tick in this thread and its drain (snapshot); False when the target cannot be read."""
        if not self.sampler.sample_once():
            return False
        self.drainer.drain(final=True)
        return True

    def running(self) -> bool:
        return self.thread.is_alive() and not self.stalled

    def interrupt(self) -> None:
        self.interrupted = True
        self.sampler.stop()

    def step(self, wait: bool = True) -> dict:
        """Wait for the next drain (unless told not to), drain, check the target; the sampler's stats."""
        if wait:
            self.waiter.wait()
        self.drainer.drain()
        pid = self.target.pid
        ic = self.in_context
        if ic is not None:      # the in-context reads' timers on the threads live now
            ic.follow(pid, [live[0] for live in self.drainer.live.values()])
        if not alive(pid):
            self.sampler.stop()
        st = self.sampler.stats()
        if st["errors"] > self._errors_seen and time.monotonic() - self._maps_checked >= DRAIN_MAX_S:
            # reads failed outright: a thread ended mid-read, or the program exec'd another one
            # (same pid, none of the memory the registry points into): its registry is no
            # longer mapped then, and the recording ends. The maps of a large app take ~1 ms
            # to read: asked at most every DRAIN_MAX_S, however often threads end mid-read.
            self._errors_seen, self._maps_checked = st["errors"], time.monotonic()
            if not self.execd and execd_another(pid, self.target.registry_ino):
                self.execd = True
                self.sampler.stop()
        # a watchdog that needs nothing from the sampler thread: a recording never outlives its
        # duration by more than a few seconds, whatever happens to that thread
        duration_s = self.opts.duration_s
        if duration_s and time.monotonic() - self.started > duration_s + STALL_GRACE_S:
            self.sampler.stop()
            self.thread.join(STALL_GRACE_S)
            if self.thread.is_alive():
                self.stalled = True
        return st

    def abort(self) -> None:
        self.sampler.stop()
        if self.sampling and self.thread.ident is None:
            self.thread.start()                 # it joins the sampler's native thread, as it would have
        if self.thread.ident is not None:       # started (an abort can come before it is)
            self.thread.join(STALL_GRACE_S)

    def drain_last(self) -> None:
        """After the loop: what the sampler gathered since the last step (not from a stalled one).
        The recording ends now (the end record's at_ns): the span ring is read after this moment,
        so every request or job that ended by then is in the trace."""
        self.ended_ns = _sampler.monotonic_ns()
        if not self.stalled:
            self.drainer.drain()
        self.drainer.spans.drain(final=True)

    def close(self) -> None:
        """eBPF detached (its last births written, the ISeqs still to read named), the kernel view
        unmapped, the wake-up closed; each only once nothing can use it any more."""
        if self.symbolizer is not None:
            self.drainer.sync_ebpf()            # its last births written ...
        self.drainer.name_remotely(final=True)  # ... and what is left read for the last time (the probes in)
        if self.hub is not None:
            self.hub.leave(self)
            if self.own_hub:
                self.hub.close()
        if not self.thread.is_alive():           # a stalled sampler thread may still write to it
            self.sampler.set_wake_fd(-1)
            self.waiter.wakeup.close()

    def reason(self) -> str:
        """Why the recording ended, as the trace's end record says it."""
        why = self.result[0] if self.result else "stopped"
        if self.stalled:
            why = "stalled"
        if self.interrupted:
            return "interrupted"
        if self.execd:
            return "target-exec"
        if why == "stopped" or why == "target-exited":
            return "target-exited" if not alive(self.target.pid) else why
        return why

    def counts(self, stats: Optional[dict] = None) -> dict:
        """The closing counts (the trace's end record); `stats`: the sampler's as of a moment (a
        rotation's cut), else now."""
        stats = stats or self.sampler.stats()
        d = self.drainer
        return {"at_ns": self.ended_ns or _sampler.monotonic_ns(), "reason": self.reason(), "ticks": stats["ticks"],
                "late": stats["late"], "missed": stats["missed"], "samples": stats["samples"], "torn": stats["torn"],
                "retried": stats["retried"], "reused": stats["reused"], "errors": stats["errors"],
                "yjit_no_line": stats["yjit_no_line"], "span_unsure": stats["span_unsure"],
                "in_context": stats["in_context"], "in_context_since_ns": self.in_context_since_ns,
                "in_context_untimed": self.in_context.untimed(self.target.pid) if self.in_context is not None else 0,
                "pauses_seen": stats["pauses_seen"], "zjit_frames": stats["zjit_frames"],
                "zjit_unread": stats["zjit_unread"],
                "spans_lost": d.spans.lost, "endpoints_refused": self.target.registry.strings_refused,
                "threads": stats["threads"], "symbol_errors": d.symbol_errors,
                "names_superseded": d.superseded, "names_unproven": d.unproven, "names_read_in_sweep": d.sweep_reads,
                "unnamed": {"iseqs": d.unnamed_iseqs, "methods": d.unnamed_methods},
                "renamed": {"iseqs": d.renamed_iseqs, "methods": d.renamed_methods},
                "ebpf": self.symbolizer.summary() if self.symbolizer is not None else None,
                "threads_from": threads_from(self.sampler, self.kernel_view)}
