"""The eBPF symbolizer's probes in and out of each recorded process (`symbolizer.EbpfSymbolizer` is a
`ProbeAttachment`): its creation probes as uprobe_multi links where the kernel has them, else bcc's
perf events; the GC mover's probe; the program's pause flag, set here and mapped for the samplers;
taking the creation probes out without stalling the app (`uprobe_link`)."""
from __future__ import annotations

import ctypes
import mmap
import os
import threading
import time
from collections import deque
from typing import Callable, Deque, Dict, List, Optional, Tuple

from . import uprobe_link

_KEPT_MAPPED: List[mmap.mmap] = []     # the pause flags mapped (ProbeAttachment._map_pause_flag)


class ProbedProcess:
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


class ProbeAttachment:
    """EbpfSymbolizer's attaching and detaching (it holds the state: the compiled program `_bpf`, the
    probed object `obj`, the link programs `_link_progs`, the warm-up probe's `_warm_target`, and
    `targets`, pid -> ProbedProcess)."""

    def _add_tgid(self, pid: int) -> None:
        t = self._bpf["targets"]
        t[t.Key(pid)] = t.Leaf(1)

    def _attach_target(self, target: ProbedProcess) -> None:
        """The process's probes in: its creation probes (from now on every ISeq it makes has a
        record) and the GC mover's."""
        self._add_tgid(target.pid)
        self._attach_creators(target)
        self._attach_mover(target)
        if target.attached_ns == 1 << 63:
            target.attached_ns = time.monotonic_ns()

    def _attach_mover(self, target: ProbedProcess) -> None:
        if self.obj.mover is not None and not target.mover:
            self._bpf.attach_uprobe(name=target.open_path, addr=self.obj.mover.vaddr, fn_name="iseq_moved",
                                    pid=target.pid)
            target.mover = True

    def _detach_target(self, target: ProbedProcess) -> None:
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

    def _attach_creators(self, target: ProbedProcess) -> None:
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

    def _detach_creators(self, targets: Optional[List[ProbedProcess]] = None, gone: bool = False) -> None:
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

    @property
    def attach_kind(self) -> str:
        """How the creation probes are attached: `uprobe_multi` links, or bcc's `perf_event`s."""
        return "uprobe_multi" if self._link_progs is not None else "perf_event"
