"""The in-context reads' timers (threadtimers.ThreadTimers) on the threads of this test process: a thread's
timer is opened once and kept while the thread lives, however many drains follow it, and closed once it
exits or leaves the registry's list. The kernel answers poll with POLLHUP for a perf event with no ring
buffer mapped, alive or not: a timer closed on that was closed and opened again at every drain (a
perf_event_open, two ioctls and a close per thread and drain, and its period started over).

The events are real cpu-clock events on the threads (perf_event_open), without the BPF program the
sidecar attaches to them: what is tested is when they are opened and closed."""
from __future__ import annotations

import ctypes
import os
import threading
import time

import pytest

from sdb_sidecar.ebpf import threadtimers
from sdb_sidecar.ebpf.threadtimers import ThreadTimers


def open_event(tid: int, period_ns: int, prog_fd: int) -> int:
    """threadtimers.open_timer without the BPF program: a cpu-clock event on thread tid, enabled."""
    attr = threadtimers._Attr(type=threadtimers.PERF_TYPE_SOFTWARE, size=ctypes.sizeof(threadtimers._Attr),
                              config=threadtimers.PERF_COUNT_SW_CPU_CLOCK, sample_period=period_ns,
                              flags=threadtimers.ATTR_DISABLED)
    fd = threadtimers._libc.syscall(threadtimers._NR_PERF_EVENT_OPEN.get(os.uname().machine, -1),
                                    ctypes.byref(attr), tid, -1, -1, threadtimers.PERF_FLAG_FD_CLOEXEC)
    if fd < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    if threadtimers._libc.ioctl(fd, threadtimers.PERF_EVENT_IOC_ENABLE, 0) != 0:
        e = ctypes.get_errno()
        os.close(fd)
        raise OSError(e, os.strerror(e))
    return fd


@pytest.fixture
def opened(monkeypatch):
    """The tids threadtimers opened a timer for, in order (each a real event)."""
    seen = []

    def counted(tid, period_ns, prog_fd):
        fd = open_event(tid, period_ns, prog_fd)
        seen.append(tid)
        return fd
    try:
        os.close(open_event(threading.get_native_id(), 1_000_000, -1))
    except OSError as e:
        pytest.skip(f"no cpu-clock perf event for a thread here ({e}; kernel.perf_event_paranoid, CAP_PERFMON)")
    monkeypatch.setattr(threadtimers, "open_timer", counted)
    return seen


class Parked:
    """A thread of this process that waits until told to end; its tid."""

    def __init__(self):
        self.go = threading.Event()
        self.started = threading.Event()
        self.thread = threading.Thread(target=self._run)
        self.thread.start()
        self.started.wait(10)

    def _run(self):
        self.tid = threading.get_native_id()
        self.started.set()
        self.go.wait(60)

    def end(self):
        """Ends it and waits until the kernel has let it go (pthread_join returns a moment before
        its /proc/PID/task/TID is gone)."""
        self.go.set()
        self.thread.join(10)
        deadline = time.monotonic() + 10
        while os.path.exists(f"/proc/{os.getpid()}/task/{self.tid}") and time.monotonic() < deadline:
            time.sleep(0.001)


def test_a_live_threads_timer_is_opened_once_and_kept_across_drains(opened):
    # GIVEN a thread of this process, listed by its registry
    pid, parked = os.getpid(), Parked()
    timers = ThreadTimers(prog_fd=-1, period_ns=1_000_000, limit=8)
    timers.admit(pid)
    try:
        # WHEN five drains follow the same live threads
        for _ in range(5):
            timers.follow(pid, [parked.tid])
            fd = timers.fds.get(parked.tid)
            assert fd is not None and os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[perf_event]"
        # THEN its timer was opened once and is open still (an event with no ring buffer polls POLLHUP
        # while its thread lives: closing on that reopened it at every drain)
        assert opened == [parked.tid]
        assert timers.counts(pid) == {"timed": 1, "untimed": 0}
    finally:
        timers.close()
        parked.end()


def test_an_exited_threads_timer_is_closed_even_while_still_listed_and_not_counted_untimed(opened):
    # GIVEN two threads with their timers
    pid, stays, leaves = os.getpid(), Parked(), Parked()
    timers = ThreadTimers(prog_fd=-1, period_ns=1_000_000, limit=8)
    timers.admit(pid)
    try:
        timers.follow(pid, [stays.tid, leaves.tid])
        assert sorted(timers.fds) == sorted([stays.tid, leaves.tid])
        # WHEN one exits, and the next drain still lists it (its end not read from the registry yet)
        leaves.end()
        assert not os.path.exists(f"/proc/{pid}/task/{leaves.tid}")
        timers.follow(pid, [stays.tid, leaves.tid])
        # THEN its timer is closed and no other opened for it; the live one's is kept
        assert list(timers.fds) == [stays.tid]
        assert sorted(opened) == sorted([stays.tid, leaves.tid])
        # AND it counts as timed once, never as read from outside for want of a timer
        assert timers.counts(pid) == {"timed": 2, "untimed": 0}
        # WHEN the next drain no longer lists the other one (it left the registry)
        timers.follow(pid, [])
        # THEN no timer is left
        assert timers.fds == {} and timers.owner == {}
    finally:
        timers.close()
        stays.end()
        leaves.end()
