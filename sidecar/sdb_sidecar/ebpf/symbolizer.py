"""The eBPF symbolizer: ISeqs named at birth, from probes in the target's own Ruby.

`bpf/iseq_events.c` is compiled once per recording with bcc, with the layout row the gem published
as constants, and attached for each recorded process (a process tree shares the one program: its
processes run the same Ruby): a uprobe on `rb_iseq_translate_threaded_code` (every compiled ISeq)
where the build keeps hidden symbols, else uretprobes on the functions that return a new ISeq, the
binary loader's always, plus a uprobe on GC compaction's object mover where the build lets us find
it (`probes.py` says which). A thread
of this module reads the events and queues them, per process, for that process's Drainer
(`EbpfView`), which writes `iseq` records with `source: "ebpf"` and the event's own time, and names
every ISeq a sample shows first from its birth record when eBPF saw that birth and nothing was born
at its address unseen since (`attached_throughout`), by a remote read otherwise.

Anything missing (not root, no bcc, no kernel headers, no uprobes, no probe point in the target)
raises `EbpfUnavailable` with the reason: the caller prints one notice and the remote-read path
names everything.

The cost is bounded (`Governor`): a probe costs the app ~2 us per ISeq, so when the creation probes
fire faster than `max_rate` events per second (bursts of a tenth of a second's worth allowed) they
stop sending (the program sets its own pause flag at the record that spends the budget) and are
taken out (a pause: ISeqs born then are named by remote reads at first sight), then attached again
after a backoff. They are uprobe_multi links where the kernel has them, taken out without stalling
the app (`uprobe_link`). A pause makes every name eBPF gave earlier uncertain (the address may have
been freed and reused by an ISeq no probe saw): `attached_throughout` tells the Drainer which names
still hold. Its start is when the probes stopped themselves, which `sync` records before the
Drainer names anything, even when the reader thread has not paused yet.
"""
from __future__ import annotations

import ctypes
import os
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple

from ..sampler import _sampler
from . import probes, uprobe_link
from ..target import process
from .bpfload import EbpfUnavailable, _import_bcc, bpf_source, check_available, compile_bpf
from .attach import ProbeAttachment, ProbedProcess
from .governor import BACKOFF_MAX_S, DEFAULT_MAX_RATE, Governor
from .iseq_events import (EV_MOVE, EV_NEW, F_BASE_IS_LABEL, F_NO_REALPATH, F_REALPATH_IS_PATH, F_TRUNCATED,
                          F_UNREADABLE, HDR_SIZE, EventHdr, bpf_cflags)
from ..target.symbols import trace_iseq_type
from ..sampler.wakeup import Wakeup

__all__ = ["DEFAULT_MAX_RATE", "EbpfSymbolizer", "EbpfUnavailable", "Governor", "bpf_source", "check_available"]

POLL_S = 0.02              # the ring buffer is drained this often while ISeqs come (records wake the reader only when over budget) ...
IDLE_POLL_S = 1.0          # ... and after a poll that found none, when the next record comes (it wakes the reader), or this often


class EbpfSymbolizer(ProbeAttachment):
    """Compiles the program once, attaches it for each process added (`add`), and reads ISeq events
    until close(). `start(pid)` compiles and adds the first process; the Drainer of each process
    reads through an `EbpfView`. Pauses (the governor) are the program's: every process's probes go
    out and come back together."""

    def __init__(self, pid: int, layout: dict, max_rate: float = DEFAULT_MAX_RATE,
                 on_pause: Optional[Callable[[], None]] = None):
        self.pid = pid                           # the first process (start)
        self.layout = layout
        self.max_rate = max_rate                 # creation events per second before a pause (0: never)
        self.targets: Dict[int, ProbedProcess] = {pid: ProbedProcess(pid, on_pause)}
        self.pauses: List[list] = []             # [start_ns, end_ns or None]: creation probes detached
        self._stop_recorded = False             # sync() recorded the start of a pause the probes began
        self._pause_lock = threading.Lock()
        self._consume_lock = threading.Lock()    # the reader thread, sync() and add() take turns at the ring
        self._syncing = False
        self._paused = False
        self._trusted_from_ns = 0                # ISeqs born before this (a resume) are not put in the map
        self._drained = 0                        # ISeq records taken in the current drain ...
        self._drain_budget = float("inf")        # ... and how many it may take before the governor looks
        self.lost = 0                            # records the probes dropped (ring buffer full)
        self.counts: Dict[str, int] = {}         # events per probe symbol, every process's (removed ones too)
        self._stop = threading.Event()
        self._wake: Optional[Wakeup] = None      # close() wakes the reader with it
        self._thread: Optional[threading.Thread] = None
        self._bpf = None
        self.pause_word = 0                      # where the samplers read the pause flag (_map_pause_flag)
        self.obj: Optional[probes.RubyObject] = None
        self._obj_id: Optional[Tuple[int, int]] = None   # (st_dev, st_ino) of the probed file
        self._link_progs: Optional[List[int]] = None
        self._warm_target: Optional[Tuple[str, int]] = None

    @property
    def attached_ns(self) -> int:
        """When the first process's creation probes were in."""
        return self.targets[self.pid].attached_ns if self.pid in self.targets else 1 << 63

    # ------------------------------------------------------------ setup
    def start(self) -> None:
        check_available()
        BPF = _import_bcc()
        try:
            self.obj = probes.find_ruby_object(self.pid)
            st = os.stat(self.obj.open_path)
        except probes.ProbeError as e:
            raise EbpfUnavailable(str(e)) from None
        except OSError as e:
            raise EbpfUnavailable(f"cannot read the Ruby of process {self.pid}: {e.strerror}") from None
        self._obj_id = (st.st_dev, st.st_ino)
        self.targets[self.pid].open_path = self.obj.open_path
        creators = self.obj.creators
        src = bpf_source("iseq_events.c")
        # two entry points per probe: one for a uprobe_multi link (the programs are loaded for that
        # attach type), one for bcc's perf-event attach where the kernel has no such links
        entry = "".join(f"int iseq_created{kind}_{i}(struct pt_regs *ctx) {{ return iseq_created(ctx, {i}, "
                        f"{'PT_REGS_PARM1(ctx)' if p.entry else 'PT_REGS_RC(ctx)'}); }}\n"
                        for i, p in enumerate(creators) for kind in ("", "_link"))
        src = src.replace("\nPROBE_FUNCTIONS\n", "\n" + entry)
        try:
            self._bpf = compile_bpf(BPF, src, bpf_cflags(self.layout))
        except Exception as e:  # bcc raises a bare Exception for a failed compile or load
            raise EbpfUnavailable(f"the eBPF program did not load: {str(e).splitlines()[0] if str(e) else e}") \
                from None
        try:
            # PyInit__sampler: a function of ours that ran once, at import
            self._warm_target = (_sampler.__file__, probes.symbol_offset(_sampler.__file__, "PyInit__sampler"))
        except (OSError, probes.ProbeError, ImportError):
            self._warm_target = None
        try:
            self._link_progs = [
                self._bpf.load_func(f"iseq_created_link_{i}", BPF.KPROBE,
                                    attach_type=uprobe_link.BPF_TRACE_UPROBE_MULTI).fd
                for i in range(len(creators))]
        except Exception:
            self._link_progs = None             # a kernel before 6.6: bcc's perf-event probes
        self._set_paused_flag(0)
        self.pause_word = self._map_pause_flag()
        try:
            self._attach_target(self.targets[self.pid])
            self._bpf["events"].open_ring_buffer(self._on_record)
        except Exception as e:
            self.close()
            raise EbpfUnavailable(f"cannot attach uprobes to {self.obj.path}: {e}") from None
        self._governor = Governor(self.max_rate, time.monotonic())
        self._wake = Wakeup()
        self._thread = threading.Thread(target=self._run, name="sdb-ebpf", daemon=True)
        self._thread.start()

    def add(self, pid: int, on_pause: Optional[Callable[[], None]] = None) -> None:
        """Attach the program for another process of the recording (it must run the same Ruby: the
        same file, the same layout; its Drainer reads through an `EbpfView`). EbpfUnavailable says
        why not."""
        if self._bpf is None or self._thread is None:
            raise EbpfUnavailable("the eBPF symbolizer is closed")
        try:
            open_path = f"/proc/{pid}/root{probes.find_ruby_object(pid).path}"
            st = os.stat(open_path)
        except probes.ProbeError as e:
            raise EbpfUnavailable(str(e)) from None
        except OSError as e:
            raise EbpfUnavailable(f"cannot read the Ruby of process {pid}: {e.strerror}") from None
        if (st.st_dev, st.st_ino) != self._obj_id:
            raise EbpfUnavailable(f"process {pid} runs another Ruby than {self.obj.path}")
        target = ProbedProcess(pid, on_pause, open_path)
        with self._consume_lock:
            self.targets[pid] = target
            try:
                if self._paused or self._stop_recorded:
                    self._add_tgid(pid)          # its probes come with the resume: births unseen till then
                    self._attach_mover(target)
                else:
                    self._attach_target(target)
            except Exception as e:
                self._detach_target(target)
                del self.targets[pid]
                raise EbpfUnavailable(f"cannot attach uprobes to {self.obj.path} in process {pid}: {e}") from None

    def remove(self, pid: int) -> None:
        """Detach the probes of one process (its recording is over); its records are dropped."""
        with self._consume_lock:
            target = self.targets.pop(pid, None)
        if target is not None and self._bpf is not None:
            self._detach_target(target)

    # ------------------------------------------------------------ the governor
    def _pause(self, start_ns: int = 0) -> None:
        """Detach the creation probes (gc_move stays: it costs nothing without compaction). ISeqs
        born from start_ns (now, or when the probes stopped themselves) are named by remote reads;
        what eBPF named before may be gone and its address reused unseen, so every such address is
        forgotten for moves. A pause
        whose start `sync` already recorded (the probes had stopped themselves) keeps that start, and
        the record `sync` sent for it."""
        announced = False
        with self._pause_lock:
            self._paused = True
            if self._stop_recorded:
                self._stop_recorded = False
                start_ns = self.pauses[-1][0]
                announced = True                # sync sent its record
            else:
                start_ns = start_ns or time.monotonic_ns()
                self.pauses.append([start_ns, None])
        self._paused_changed()
        if not announced:
            self._announce_pause(start_ns)
        self._detach_creators()
        self._bpf.ring_buffer_consume()          # the events born before the probes were gone
        for t in self.targets.values():
            t.known.clear()

    def _announce_pause(self, start_ns: int) -> None:
        """Every process's `pause` record (once per pause: `sync` or `_pause`, whichever saw it first)."""
        g = self._governor
        self._to_all({"kind": "pause", "at_ns": start_ns, "rate": round(g.rate), "backoff_s": g.backoff})

    def _to_all(self, record: dict) -> None:
        for t in list(self.targets.values()):
            t.records.append(record)

    def _attach_all(self) -> None:
        """Every process's creation probes back in (the end of a pause)."""
        self._set_paused_flag(0)
        for t in list(self.targets.values()):
            self._attach_creators(t)
            if t.attached_ns == 1 << 63:    # added during the pause
                t.attached_ns = time.monotonic_ns()

    def _resume(self) -> None:
        try:
            self._attach_all()
        except Exception:
            # the target is exiting, or the kernel refused: stay paused, try again later
            self._detach_creators()
            self._governor.paused_until = time.monotonic() + BACKOFF_MAX_S
            return
        with self._pause_lock:
            end_ns = time.monotonic_ns()
            self.pauses[-1][1] = end_ns
            self._trusted_from_ns = end_ns
            self._paused = False
        self._to_all({"kind": "resume", "at_ns": end_ns})
        self._governor.resumed(time.monotonic())
        self._paused_changed()

    def _paused_changed(self) -> None:
        """The samplers name every ISeq anew from now (on_pause: Sampler.forget_iseqs): the sooner
        after a pause starts, the fewer samples whose names the pause voids (sdb_trace symbol_at)."""
        for t in list(self.targets.values()):
            if t.on_pause is not None:
                try:
                    t.on_pause()
                except Exception:
                    pass

    @property
    def paused(self) -> bool:
        """The creation probes send nothing: paused, or stopped by themselves (recorded by sync)."""
        return self._paused or self._stop_recorded

    def attached_throughout(self, pid: int, a_ns: int, b_ns: int) -> bool:
        """True if process pid's creation probes were attached all the time from a_ns to b_ns, and
        no record was lost: then no ISeq was born there unseen in between, and a name eBPF or a
        remote read gave at a_ns still holds at b_ns unless a later record says otherwise."""
        t = self.targets.get(pid)
        if t is None or a_ns < t.attached_ns or self.lost:
            return False
        with self._pause_lock:
            for start, end in reversed(self.pauses):
                if end is not None and end <= a_ns:
                    return True
                if start <= b_ns:
                    return False
        return True

    # ------------------------------------------------------------ events
    def _on_record(self, ctx, data, size):
        self._on_event(data, size)
        # a burst goes on while we drain it: once this drain alone overdraws the budget, stop
        # draining (a negative return ends libbpf's loop; the rest waits) and let the governor pause
        if self._drained > self._drain_budget and not self._paused and not self._stop.is_set() \
                and not self._syncing:
            return -1
        return 0

    def sync(self) -> None:
        """Read every record the probes wrote until now (the Drainer, before it names ISeqs remotely:
        an ISeq born before this call has its record then, however late the reader thread runs)."""
        with self._consume_lock:
            if self._bpf is None or self._thread is None:
                return
            self._syncing = True
            try:
                self._bpf.ring_buffer_consume()
                self.lost = sum(self._bpf["dropped"][0])
                # the probes stop sending by themselves at the record that spends the budget: from
                # then on births go unseen, before the reader thread gets to pause. The Drainer must
                # know it now (attached_throughout), or it would take an old birth's name for an
                # ISeq born since at the same address.
                if not self._paused and not self._stop_recorded:
                    stopped_at = self._bpf["budget"][self._bpf["budget"].Key(2)].value
                    if stopped_at:
                        with self._pause_lock:
                            self.pauses.append([stopped_at, None])
                            self._stop_recorded = True
                        self._paused_changed()
                        # its record now, not when the governor gets to pause: a recording that
                        # ends first (the last sync is close's) counted a pause its trace lacked,
                        # and the names given before it were taken after its start
                        self._announce_pause(stopped_at)
            finally:
                self._syncing = False

    def _on_event(self, data, size):
        if size < HDR_SIZE:
            return          # not a record the program writes: nothing in it can be trusted
        h = ctypes.cast(data, ctypes.POINTER(EventHdr)).contents
        t = self.targets.get(h.tgid)
        if t is None:
            return          # a process whose recording is over
        if h.kind == EV_MOVE:
            self._moved(t, h.addr, h.addr2, h.time_ns)
            return
        if h.kind != EV_NEW:
            return
        sym = self.obj.creators[h.probe].symbol if h.probe < len(self.obj.creators) else "?"
        t.counts[sym] = t.counts.get(sym, 0) + 1
        self.counts[sym] = self.counts.get(sym, 0) + 1
        self._drained += 1
        if h.flags & (F_TRUNCATED | F_UNREADABLE) or HDR_SIZE + sum(h.len) > size:
            # the Drainer reads this one remotely (a string longer than the probe copies, or a page
            # the probe could not read)
            t.known.pop(h.addr, None)
            t.records.append({"kind": "remote", "addr": h.addr, "at_ns": h.time_ns, "probe": sym,
                              "encoded": h.addr2})
            return
        raw = ctypes.string_at(data + HDR_SIZE, sum(h.len))
        strs, off = [], 0
        for n in h.len:
            strs.append(raw[off:off + n].decode("utf-8", "replace"))
            off += n
        label, base_label, path, realpath = strs
        if h.flags & F_NO_REALPATH:
            realpath = None
        elif h.flags & F_REALPATH_IS_PATH:
            realpath = path
        if h.flags & F_BASE_IS_LABEL:
            base_label = label
        info = (label, base_label, path, realpath, h.first_line, h.type)
        if t.known.get(h.addr) == (info, h.addr2):
            return              # the binary loader hands out ISeqs it already loaded
        if not self._paused and h.time_ns >= self._trusted_from_ns and h.addr2 != 0:
            t.known[h.addr] = (info, h.addr2)
        # else: born while the probes were going or coming back (some may have missed a birth at
        # the same address then): the record names it from birth, but a move does not carry it
        t.records.append({"kind": "new", "addr": h.addr, "at_ns": h.time_ns, "probe": sym,
                             "label": label, "base_label": base_label, "path": path, "realpath": realpath,
                             "first_line": h.first_line, "type": trace_iseq_type(self.layout, h.type),
                             "encoded": h.addr2})

    @staticmethod
    def _moved(t: ProbedProcess, old: int, new: int, t_ns: int) -> None:
        known = t.known.pop(old, None)
        if known is not None:
            t.known[new] = known            # a move keeps the body and its instructions
        else:
            t.known.pop(new, None)      # an ISeq eBPF did not name moved over one it did
        t.records.append({"kind": "move", "addr": new, "from": old, "at_ns": t_ns})

    def _run(self) -> None:
        """Every POLL_S (or at once when the probes spent the governor's budget: the record that
        does so wakes us), drain the ring buffer, publish the names, let the governor decide."""
        g = self._governor
        budget = self._bpf["budget"]
        ring_fd = self._bpf["events"].map_fd
        sent_seen = 0
        poll_s = POLL_S
        while not self._stop.is_set():
            try:
                self._drained = 0
                self._drain_budget = g.tokens + g.max_rate * poll_s if g.max_rate > 0 else float("inf")
                self._wake.wait([ring_fd], poll_s)     # records that wake us, close(), or poll_s
                with self._consume_lock:
                    if self._drained <= self._drain_budget:
                        self._bpf.ring_buffer_consume()
                sent = budget[budget.Key(0)].value
                events, sent_seen = sent - sent_seen, sent
                # quiet: poll less often (an ISeq born meanwhile is named later, or read remotely if
                # sampled first); a burst still wakes us at the record that spends the budget
                poll_s = POLL_S if events or self._paused or self._stop.is_set() else IDLE_POLL_S
                if poll_s == IDLE_POLL_S:
                    budget[budget.Key(3)] = budget.Leaf(1)      # idle: the next record wakes us
                now = time.monotonic()
                if self._paused:
                    if g.resume_due(now):
                        self._resume()
                else:
                    stopped_at = budget[budget.Key(2)].value     # the probes spent the budget: paused
                    if g.attached(now, events, spent=stopped_at != 0):
                        self._pause(stopped_at)
                # the record that spends the budget stops the probes and wakes us (0: never)
                wake = g.wake_at(sent, POLL_S) if not self._paused else 0
                budget[budget.Key(1)] = budget.Leaf(wake)
            except Exception:
                if self._stop.is_set():
                    return
                raise

    def take(self, pid: int) -> List[dict]:
        """Process pid's records since the last call."""
        t = self.targets.get(pid)
        out = []
        while t is not None and t.records:
            out.append(t.records.popleft())
        return out

    def close(self) -> None:
        """Stop reading, read what is left, detach every probe."""
        self._stop.set()
        if self._wake is not None:
            self._wake.signal()
        if self._thread is not None:
            self._thread.join(5)
            if self._thread.is_alive():
                # the reader is still inside libbpf: consuming or freeing the ring buffer under it
                # would be a use-after-free. Leave both to process exit (the probes go with it).
                self._bpf = None
                return
            with self._consume_lock:
                self._thread = None
            self._wake.close()
            self._wake = None
            try:
                self._bpf.ring_buffer_consume()
                self.lost = sum(self._bpf["dropped"][0])
            except Exception:
                pass
        if self._bpf is not None:
            try:
                # first, without stalling a live target; without waiting for a dead one
                self._detach_creators(gone=all(process.exiting(t.pid) for t in self.targets.values()))
            except Exception:
                pass
            self._bpf.cleanup()
            self._bpf = None

    def summary(self, pid: Optional[int] = None) -> dict:
        """For the trace's end record: where the probes were, what each one saw (in process pid, or
        in all), what was lost."""
        o = self.obj
        ts = [self.targets[pid]] if pid in self.targets else list(self.targets.values())
        events = dict(ts[0].counts) if pid in self.targets else dict(self.counts)
        end_ns = time.monotonic_ns()
        with self._pause_lock:
            paused_ns = sum((end if end is not None else end_ns) - start for start, end in self.pauses)
            pauses = len(self.pauses)
        return {"object": o.path, "probes": [p.symbol for p in o.creators],
                "mover": o.mover.symbol if o.mover else None, "not_probeable": list(o.missing),
                "attach": self.attach_kind,
                "attached_ns": ts[0].attached_ns if ts else self.attached_ns,
                "events": events, "lost": self.lost, "max_rate": self.max_rate,
                "pauses": pauses, "paused_s": round(paused_ns / 1e9, 3)}
