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
import mmap
import os
import threading
import time
from collections import deque
from typing import Callable, Deque, Dict, List, Optional, Tuple

from sdb_trace.registry_h import SDB_NA

from . import _sampler, probes, process, uprobe_link
from .bpfload import EbpfUnavailable, _import_bcc, bpf_source, check_available, compile_bpf
from .symbols import trace_iseq_type
from .governor import BACKOFF_MAX_S, DEFAULT_MAX_RATE, Governor
from .ebpf_view import EbpfView
from .wakeup import Wakeup

_KEPT_MAPPED: List[mmap.mmap] = []     # the pause flags mapped (EbpfSymbolizer._map_pause_flag)

__all__ = ["DEFAULT_MAX_RATE", "EbpfSymbolizer", "EbpfUnavailable", "EbpfView", "Governor", "bpf_source",
           "check_available"]

EV_NEW, EV_MOVE = 1, 2
F_TRUNCATED, F_UNREADABLE, F_NO_REALPATH, F_BASE_IS_LABEL, F_REALPATH_IS_PATH = 1, 2, 4, 8, 16
NSTR = 4
POLL_S = 0.02              # the ring buffer is drained this often while ISeqs come (records wake the reader only when over budget) ...
IDLE_POLL_S = 1.0          # ... and after a poll that found none, when the next record comes (it wakes the reader), or this often
RINGBUF_PAGES = 2048        # 8 MiB: ~25,000 records, a second of the busiest boot measured
class EventHdr(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_uint32), ("flags", ctypes.c_uint32), ("time_ns", ctypes.c_uint64),
                ("addr", ctypes.c_uint64), ("addr2", ctypes.c_uint64), ("type", ctypes.c_uint32),
                ("first_line", ctypes.c_int32), ("len", ctypes.c_uint16 * NSTR), ("probe", ctypes.c_uint32),
                ("tgid", ctypes.c_uint32)]


HDR_SIZE = ctypes.sizeof(EventHdr)


def bpf_cflags(layout: dict) -> List[str]:
    """The layout row as -D constants of the BPF program."""
    L = layout
    consts = {
        "ISEQ_BODY": L["iseq_body"],
        "BODY_TYPE": L["body_type"], "BODY_PATHOBJ": L["body_pathobj"], "BODY_BASE_LABEL": L["body_base_label"],
        "BODY_LABEL": L["body_label"], "BODY_FIRST_LINENO": L["body_first_lineno"],
        "BODY_ISEQ_ENCODED": L["body_iseq_encoded"],
        "FIRST_LINENO_FIXNUM": 1 if L["body_first_lineno_is_fixnum"] else 0,
        "RSTR_NOEMBED_BIT": L["rstring_noembed_bit"], "RSTR_HEAP_LEN": L["rstring_heap_len"],
        "RSTR_HEAP_PTR": L["rstring_heap_ptr"], "RSTR_EMBED_LEN": L["rstring_embed_len"],
        "RSTR_EMBED_ARY": L["rstring_embed_ary"], "RSTR_EMBED_LEN_SHIFT": L["rstring_embed_len_shift"],
        "RSTR_EMBED_LEN_MASK": L["rstring_embed_len_mask"],
        "RARY_EMBED_BIT": L["rarray_embed_bit"], "RARY_EMBED_LEN_SHIFT": L["rarray_embed_len_shift"],
        "RARY_EMBED_LEN_MASK": L["rarray_embed_len_mask"], "RARY_EMBED_ARY": L["rarray_embed_ary"],
        "RARY_HEAP_LEN": L["rarray_heap_len"], "RARY_HEAP_PTR": L["rarray_heap_ptr"],
        # Ruby's numbers: type tags and where an imemo keeps its type
        "RB_T_MASK": L["t_mask"], "RB_T_STRING": L["t_string"], "RB_T_ARRAY": L["t_array"],
        "RB_T_IMEMO": L["t_imemo"], "RB_IMEMO_SHIFT": L["imemo_shift"], "RB_IMEMO_MASK": L["imemo_mask"],
        "RB_IMEMO_ISEQ": L["imemo_iseq"], "RB_IMMEDIATE_MASK": L["immediate_mask"],
        "RB_FIXNUM_SHIFT": L["fixnum_shift"],
    }
    consts["RINGBUF_PAGES"] = RINGBUF_PAGES
    consts["SDB_NA"] = SDB_NA                    # a layout field the row does not have
    return [f"-D{k}={int(v)}" for k, v in consts.items()]


class _Target:
    """One process the probes are attached for, and what is kept for it."""

    def __init__(self, pid: int, on_pause: Optional[Callable[[], None]], open_path: str = ""):
        self.pid = pid
        self.open_path = open_path               # the probed file, through the process's own root
        self.on_pause = on_pause                 # called when the probes stop or come back
        self.records: Deque[dict] = deque()      # for its Drainer, in event order
        self.attached_ns = 1 << 63               # when its creation probes were first in
        self.counts: Dict[str, int] = {}         # events per probe symbol
        # addr -> (the name eBPF gave it, its instruction buffer): what a GC move carries to its new address
        self.known: Dict[int, Tuple[tuple, int]] = {}
        self.links: List[uprobe_link.UprobeLink] = []
        self.events: List[bytes] = []            # bcc's names of its creation probes' perf events
        self.mover = False                       # the GC mover's probe is attached for it


class EbpfSymbolizer:
    """Compiles the program once, attaches it for each process added (`add`), and reads ISeq events
    until close(). `start(pid)` compiles and adds the first process; the Drainer of each process
    reads through an `EbpfView`. Pauses (the governor) are the program's: every process's probes go
    out and come back together."""

    def __init__(self, pid: int, layout: dict, max_rate: float = DEFAULT_MAX_RATE,
                 on_pause: Optional[Callable[[], None]] = None):
        self.pid = pid                           # the first process (start)
        self.layout = layout
        self.max_rate = max_rate                 # creation events per second before a pause (0: never)
        self.targets: Dict[int, _Target] = {pid: _Target(pid, on_pause)}
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

    def add(self, pid: int, on_pause: Optional[Callable[[], None]] = None) -> "EbpfView":
        """Attach the program for another process of the recording (it must run the same Ruby: the
        same file, the same layout). EbpfUnavailable says why not."""
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
        target = _Target(pid, on_pause, open_path)
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
        return EbpfView(self, pid)

    def remove(self, pid: int) -> None:
        """Detach the probes of one process (its recording is over); its records are dropped."""
        with self._consume_lock:
            target = self.targets.pop(pid, None)
        if target is not None and self._bpf is not None:
            self._detach_target(target)

    def _add_tgid(self, pid: int) -> None:
        t = self._bpf["targets"]
        t[t.Key(pid)] = t.Leaf(1)

    def _attach_target(self, target: _Target) -> None:
        """The process's probes in: its creation probes (from now on every ISeq it makes has a
        record) and the GC mover's."""
        self._add_tgid(target.pid)
        self._attach_creators(target)
        self._attach_mover(target)
        if target.attached_ns == 1 << 63:
            target.attached_ns = time.monotonic_ns()

    def _attach_mover(self, target: _Target) -> None:
        if self.obj.mover is not None and not target.mover:
            self._bpf.attach_uprobe(name=target.open_path, addr=self.obj.mover.vaddr, fn_name="iseq_moved",
                                    pid=target.pid)
            target.mover = True

    def _detach_target(self, target: _Target) -> None:
        try:
            self._detach_creators([target])
            if target.mover:
                target.mover = False
                self._bpf.detach_uprobe(name=target.open_path, addr=self.obj.mover.vaddr, pid=target.pid)
        except Exception:
            pass            # the process is gone: its probes went with it
        try:
            t = self._bpf["targets"]
            del t[t.Key(target.pid)]
        except Exception:
            pass

    def _attach_creators(self, target: _Target) -> None:
        """One process's creation probes, as uprobe_multi links where the kernel has them (they come
        out without stalling the app: see uprobe_link), else as bcc's perf events."""
        target.links = []
        target.events = []
        if self._link_progs is not None:
            try:
                for p, prog in zip(self.obj.creators, self._link_progs):
                    target.links.append(uprobe_link.UprobeLink(target.open_path, p.offset, target.pid, prog,
                                                               retprobe=not p.entry))
                return
            except OSError:
                for link in target.links:
                    link.close()
                target.links = []
                if any(t.links for t in self.targets.values()):
                    raise
                self._link_progs = None         # links refused: perf events from now on
        for i, p in enumerate(self.obj.creators):
            attach = self._bpf.attach_uprobe if p.entry else self._bpf.attach_uretprobe
            before = set(self._bpf.uprobe_fds)
            attach(name=target.open_path, addr=p.vaddr, fn_name=f"iseq_created_{i}", pid=target.pid)
            target.events += [ev for ev in self._bpf.uprobe_fds if ev not in before]

    def _map_pause_flag(self) -> int:
        """The address, in this process, of the program's pause flag (`budget[2]`, a mapped array):
        what the samplers watch (Sampler.watch_ebpf_pause). The mapping is kept for the life of this
        process (_KEPT_MAPPED: a page), since a stalled sampler thread may read it after close().
        0 if the kernel does not let us map it: then the samplers hear of a pause from on_pause."""
        try:
            m = mmap.mmap(self._bpf["budget"].map_fd, 4 * 8, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except (OSError, ValueError):
            return 0
        _KEPT_MAPPED.append(m)
        return ctypes.addressof(ctypes.c_char.from_buffer(m)) + 2 * 8

    def _set_paused_flag(self, value: int) -> None:
        """0: the probes send; otherwise (a pause's start time) they send nothing."""
        budget = self._bpf["budget"]
        budget[budget.Key(2)] = budget.Leaf(value)

    def _detach_creators(self, targets: Optional[List[_Target]] = None, gone: bool = False) -> None:
        """Take the creation probes out (of `targets`, else of every process) while the app may be
        hitting them hard (a pause: it is over budget). First the program's pause flag (hits until
        the breakpoint is gone cost only the trap; not for one process leaving), then a warm-up
        probe (see uprobe_link.warm: the kernel's grace period is paid where nobody waits), then
        every probe at once: the breakpoints come out within a millisecond, and each close then
        waits ~0.1-0.2 s in the kernel, in a thread of its own, as does the warm-up probe's. bcc's
        events are detached by name (by address, bcc would first resolve the ELF).
        `gone`: every process of `targets` has exited (the end of `record`): no warm-up, and the
        links' grace periods are left to another process (uprobe_link.close_elsewhere)."""
        if targets is None:
            targets = list(self.targets.values())
            budget = self._bpf["budget"]
            if budget[budget.Key(2)].value == 0:
                self._set_paused_flag(time.monotonic_ns())
        links, events = [], []
        for t in targets:
            links += t.links
            events += t.events
            t.links, t.events = [], []
        if gone:
            links = uprobe_link.close_elsewhere(links)
        if not links and not events:
            return
        warm_fd = uprobe_link.warm(*self._warm_target) if self._warm_target and not gone else None

        def detach(ev):
            try:
                self._bpf.detach_uprobe_event(ev)
            except Exception:
                pass        # not attached (a resume that failed half-way), or the target is gone
        jobs = [(link.close, ()) for link in links] + [(detach, (ev,)) for ev in events]
        if warm_fd is not None:
            jobs.append((os.close, (warm_fd,)))
        threads = [threading.Thread(target=f, args=a, name="sdb-ebpf-detach") for f, a in jobs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

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
    def attach_kind(self) -> str:
        """How the creation probes are attached: `uprobe_multi` links, or bcc's `perf_event`s."""
        return "uprobe_multi" if self._link_progs is not None else "perf_event"

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
    def _moved(t: _Target, old: int, new: int, t_ns: int) -> None:
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
