"""Which threads keep a timer (sdb_sidecar.ebpf.threadtimers.ThreadTimers.follow), on threads of this process.
The events are real cpu-clock perf events on those threads, without the BPF program (open_timer's
ioctl needs a loaded one): a perf event without a ring buffer polls as hung up while its thread
lives, which is what made the timers be closed and reopened at every drain."""
from __future__ import annotations

import ctypes
import os
import threading

import pytest

from conftest import wait_for
from sdb_sidecar.ebpf import threadtimers
from sdb_sidecar.ebpf.threadtimers import ATTR_DISABLED, PERF_COUNT_SW_CPU_CLOCK, PERF_TYPE_SOFTWARE, ThreadTimers

pytestmark = pytest.mark.once
PID = os.getpid()


@pytest.fixture
def opened(monkeypatch):
    """open_timer replaced by a cpu-clock event on the thread (no program): the tids it was called for."""
    calls = []

    def open_event(tid: int, period_ns: int, prog_fd: int) -> int:
        attr = threadtimers._Attr(type=PERF_TYPE_SOFTWARE, size=ctypes.sizeof(threadtimers._Attr),
                                  config=PERF_COUNT_SW_CPU_CLOCK, sample_period=period_ns, flags=ATTR_DISABLED)
        fd = threadtimers._libc.syscall(threadtimers._NR_PERF_EVENT_OPEN["x86_64"], ctypes.byref(attr), tid,
                                        -1, -1, threadtimers.PERF_FLAG_FD_CLOEXEC)
        if fd < 0:
            e = ctypes.get_errno()
            if e in (1, 13) and not calls:          # EPERM, EACCES: perf_event_paranoid, not root
                pytest.skip(f"perf_event_open refused here: {os.strerror(e)}")
            raise OSError(e, os.strerror(e))
        calls.append(tid)
        return fd

    monkeypatch.setattr(threadtimers, "open_timer", open_event)
    return calls


class Parked:
    """A thread of this process that waits until ended: its kernel tid."""

    def __init__(self):
        self.go, self.up = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._run)
        self.thread.start()
        self.up.wait()

    def _run(self):
        self.tid = threading.get_native_id()
        self.up.set()
        self.go.wait()

    def end(self):
        """Ends it, and waits until the kernel's task is gone too (join returns before)."""
        self.go.set()
        self.thread.join()
        wait_for(lambda: not os.path.exists(f"/proc/{PID}/task/{self.tid}"), 30, what=f"task {self.tid} gone")


def timers(limit: int = 8) -> ThreadTimers:
    t = ThreadTimers(prog_fd=-1, period_ns=1_000_000, limit=limit)
    t.admit(PID)
    return t


def test_a_live_threads_timer_stays_the_same_event_across_drains(opened):
    a = Parked()
    t = timers()
    try:
        t.follow(PID, [a.tid])
        fd = t.fds[a.tid]
        assert os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[perf_event]"
        for _ in range(5):
            t.follow(PID, [a.tid])
        assert opened == [a.tid] and t.fds == {a.tid: fd}
        assert t.counts(PID) == {"timed": 1, "untimed": 0}
    finally:
        t.close()
        a.end()


def test_an_ended_threads_timer_closes_though_the_registry_still_lists_it(opened):
    a, b = Parked(), Parked()
    t = timers()
    try:
        t.follow(PID, [a.tid, b.tid])
        gone = t.fds[a.tid]
        a.end()
        t.follow(PID, [a.tid, b.tid])           # its end record not drained yet
        assert list(t.fds) == [b.tid]
        with pytest.raises(OSError):
            os.fstat(gone)
        assert sorted(opened) == sorted([a.tid, b.tid]) and t.counts(PID) == {"timed": 2, "untimed": 0}
        t.follow(PID, [])                       # the other left the registry: no timer is left
        assert t.fds == {} and t.owner == {}
    finally:
        t.close()
        b.end()


def test_a_thread_that_ended_before_its_timer_is_neither_timed_nor_counted_untimed(opened):
    a = Parked()
    a.end()
    t = timers()
    t.follow(PID, [a.tid])
    assert opened == [] and t.fds == {} and t.counts(PID) == {"timed": 0, "untimed": 0}


def test_threads_beyond_the_limit_are_counted_once_and_timed_when_a_timer_frees(opened):
    a, b = Parked(), Parked()
    t = timers(limit=1)
    try:
        t.follow(PID, [a.tid, b.tid])
        first = next(iter(t.fds))
        other = b.tid if first == a.tid else a.tid
        for _ in range(3):
            t.follow(PID, [a.tid, b.tid])
        assert list(t.fds) == [first] and t.counts(PID) == {"timed": 1, "untimed": 1}
        t.follow(PID, [other])                  # the first one left the registry
        assert list(t.fds) == [other] and t.counts(PID) == {"timed": 2, "untimed": 1}
    finally:
        t.close()
        a.end()
        b.end()


def test_a_drain_lists_the_task_directory_once_whatever_the_number_of_timers(opened, monkeypatch):
    """Whether a timed thread still lives is one listing of /proc/PID/task a drain, not a stat per
    timer: at 100 Hz the stats were most of what a drain did beyond ed9dcc2's."""
    parked = [Parked() for _ in range(4)]
    t = timers()
    listed, stats = [], []
    real_listdir, real_exists, real_stat = os.listdir, os.path.exists, os.stat
    monkeypatch.setattr(os, "listdir", lambda p: listed.append(p) or real_listdir(p))
    monkeypatch.setattr(os.path, "exists", lambda p: stats.append(p) or real_exists(p))
    monkeypatch.setattr(os, "stat", lambda p, *a, **k: stats.append(p) or real_stat(p, *a, **k))
    try:
        tids = [p.tid for p in parked]
        t.follow(PID, tids)
        assert listed == [f"/proc/{PID}/task"] and stats == [] and sorted(t.fds) == sorted(tids)
        parked[0].end()                         # (which waits on a stat of its own)
        del listed[:], stats[:]
        for _ in range(3):
            t.follow(PID, tids)                 # the ended one is still listed by the registry
        assert sorted(t.fds) == sorted(tids[1:])
        assert listed == [f"/proc/{PID}/task"] * 3 and stats == []
        assert t.counts(PID) == {"timed": 4, "untimed": 0}
    finally:
        t.close()
        monkeypatch.undo()
        for p in parked:
            if p.thread.is_alive():
                p.end()
