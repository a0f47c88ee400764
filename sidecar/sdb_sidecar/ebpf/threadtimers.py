"""CPU-clock perf events scoped to single threads, each carrying a BPF program: the in-context reads'
timer (incontext.py), put only on the threads being recorded.

A cpu-clock event opened for a thread (perf_event_open with pid=<tid>, cpu=-1) counts only while that
thread runs, on whichever CPU it runs: its timer interrupt comes on that CPU, after `period_ns` of the
thread's running time. A CPU that runs none of the recorded threads takes no interrupt from it, and a
blocked thread costs nothing (the same event opened on every CPU, as bcc's attach_perf_event does,
interrupted every CPU of the machine at the reads' rate, whatever ran there: benchmarks/RESULTS.md,
"The reads' timer: per CPU or per thread").

Events are opened as threads appear (`follow`, given the live threads of a process at each drain)
and closed as they leave that set or exit (their /proc task entry is gone: one listing of the
process's task directory a drain, not a stat per timer, whatever the number of threads). Not by poll(): an event
without a ring buffer (these have none) polls as POLLHUP from its open on, its thread alive or not
(the kernel's perf_poll returns POLLHUP unless a ring buffer says otherwise), so taking POLLHUP for
an exit closed and reopened every timer at every drain, and a live thread was without one meanwhile.
At most `limit` are open at once; a thread beyond it (or one the kernel refused an event) is read
from outside, as every thread is between its appearance and its event, and is counted (`untimed`).
A timer stays with a tid: a thread that ended and a new one given its tid between two drains (the
kernel hands tids out in turn, so only after it went through every pid) would share it."""
from __future__ import annotations

import ctypes
import errno
import os
import platform
import threading
from typing import Dict, Iterable, Set

PERF_TYPE_SOFTWARE = 0x1
PERF_COUNT_SW_CPU_CLOCK = 0x0
PERF_FLAG_FD_CLOEXEC = 0x8
PERF_EVENT_IOC_ENABLE = 0x2400                  # _IO('$', 0)
PERF_EVENT_IOC_SET_BPF = 0x40042408             # _IOW('$', 8, __u32)
ATTR_DISABLED = 1                               # perf_event_attr's first flag bit
_NR_PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241}


class _Attr(ctypes.Structure):
    """struct perf_event_attr up to config1 (PERF_ATTR_SIZE_VER0, 64 bytes: the kernel zero-fills the rest)."""
    _fields_ = [("type", ctypes.c_uint32), ("size", ctypes.c_uint32), ("config", ctypes.c_uint64),
                ("sample_period", ctypes.c_uint64), ("sample_type", ctypes.c_uint64),
                ("read_format", ctypes.c_uint64), ("flags", ctypes.c_uint64),
                ("wakeup_events", ctypes.c_uint32), ("bp_type", ctypes.c_uint32), ("config1", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.ioctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong)


def open_timer(tid: int, period_ns: int, prog_fd: int) -> int:
    """A cpu-clock event on thread `tid` (any CPU), every period_ns of its running time, running BPF
    program prog_fd (a BPF_PROG_TYPE_PERF_EVENT): its fd. Raises OSError (ESRCH: the thread is gone)."""
    nr = _NR_PERF_EVENT_OPEN.get(platform.machine())
    if nr is None:
        raise OSError(0, f"perf_event_open's number on {platform.machine()} is not known here")
    attr = _Attr(type=PERF_TYPE_SOFTWARE, size=ctypes.sizeof(_Attr), config=PERF_COUNT_SW_CPU_CLOCK,
                 sample_period=period_ns, flags=ATTR_DISABLED)
    fd = _libc.syscall(nr, ctypes.byref(attr), tid, -1, -1, PERF_FLAG_FD_CLOEXEC)
    if fd < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    try:
        for req, arg in ((PERF_EVENT_IOC_SET_BPF, prog_fd), (PERF_EVENT_IOC_ENABLE, 0)):
            if _libc.ioctl(fd, req, arg) != 0:
                e = ctypes.get_errno()
                raise OSError(e, os.strerror(e))
    except OSError:
        os.close(fd)
        raise
    return fd


def kernel_tasks(pid: int) -> Set[int]:
    """The tids of process pid's threads that the kernel still has (its /proc task directory, listed
    once: none when the process is gone)."""
    try:
        return {int(t) for t in os.listdir(f"/proc/{pid}/task")}
    except OSError:
        return set()


class ThreadTimers:
    """The timers of the recorded threads, at most `limit` open (the drain loop follows the threads;
    the eBPF hub's thread starts them when the reads come in)."""

    def __init__(self, prog_fd: int, period_ns: int, limit: int):
        self.prog_fd = prog_fd
        self.period_ns = period_ns
        self.limit = limit
        self.fds: Dict[int, int] = {}           # tid -> its event
        self.owner: Dict[int, int] = {}         # tid -> the pid whose registry listed it
        self.untimed_now: Dict[int, Set[int]] = {}      # pid -> its live threads without a timer
        self.timed: Dict[int, int] = {}         # pid -> threads given a timer
        self.untimed: Dict[int, int] = {}       # pid -> threads read from outside for want of one
        self.pids: Set[int] = set()             # the processes whose threads are timed (`admit`)
        self.peak = 0
        self.lock = threading.Lock()

    def admit(self, pid: int) -> None:
        """Process pid's threads may be timed from now on (until `forget`)."""
        with self.lock:
            self.pids.add(pid)

    def follow(self, pid: int, tids: Iterable[int]) -> None:
        """`tids`: the live threads of process pid now (its registry's, the kernel's tids). Timers for
        those that have none (up to the limit), none any more for pid's threads not among them or
        gone. Threads of pid with no timer are counted once each while they have none."""
        live = set(tids)
        with self.lock:
            self._follow(pid, live)

    def _follow(self, pid: int, live: Set[int]) -> None:
        if pid not in self.pids:
            return              # forgotten meanwhile (its recording ended): no new timer
        tasks = kernel_tasks(pid)
        for tid in [t for t, p in self.owner.items() if p == pid and (t not in live or t not in tasks)]:
            self._close(tid)
        waiting = self.untimed_now.setdefault(pid, set())
        waiting &= live
        for tid in live:
            if tid in self.fds or tid <= 0:
                continue
            fd = -1
            if len(self.fds) < self.limit:
                if tid not in tasks:
                    continue            # it ended (its end record comes with a drain): nothing to time
                try:
                    fd = open_timer(tid, self.period_ns, self.prog_fd)
                except OSError as e:
                    if e.errno == errno.ESRCH:
                        continue        # it ended meanwhile
                    fd = -1             # refused (fds, memory): read from outside
            if fd < 0:
                if tid not in waiting:
                    waiting.add(tid)
                    self.untimed[pid] = self.untimed.get(pid, 0) + 1
                continue
            waiting.discard(tid)
            self.fds[tid], self.owner[tid] = fd, pid
            self.timed[pid] = self.timed.get(pid, 0) + 1
        self.peak = max(self.peak, len(self.fds))

    def forget(self, pid: int) -> None:
        """No timer on pid's threads any more (its recording is over); its counts stay."""
        with self.lock:
            self.pids.discard(pid)
            for tid in [t for t, p in self.owner.items() if p == pid]:
                self._close(tid)
            self.untimed_now.pop(pid, None)

    def counts(self, pid: int) -> dict:
        """Threads of pid given a timer, and those read from outside for want of one (each once)."""
        with self.lock:
            return {"timed": self.timed.get(pid, 0), "untimed": self.untimed.get(pid, 0)}

    def close(self) -> None:
        with self.lock:
            for tid in list(self.fds):
                self._close(tid)
            self.untimed_now.clear()

    def _close(self, tid: int) -> None:
        self.owner.pop(tid, None)
        os.close(self.fds.pop(tid))
