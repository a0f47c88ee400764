"""A sampler ticks in a native thread of its own, real-time from its birth, and a process tree's
recording keeps one parked ahead: starting the sampler of a process it finds creates no thread (a
thread's creation waited 50-200 ms for the mmap lock beside a CPU hog, and a Python thread also for
the GIL and a CPU: on a loaded machine a new child lost its first ~0.7 s of samples so).
benchmarks/child_first_sample.py measures the time it takes."""
from __future__ import annotations

import os
import time

import pytest

from conftest import wait_for
from sdb_sidecar.sampler import _sampler
from sdb_sidecar.recording.session import new_sampler
from sdb_sidecar.recording.options import Options
from sdb_sidecar.target.target import open_target


def threads_of_this_process() -> set:
    return set(os.listdir("/proc/self/task"))


@pytest.mark.skipif(os.geteuid() != 0, reason="a real-time thread needs root (CAP_SYS_NICE)")
def test_a_parked_sampler_thread_takes_the_sampler_real_time_and_no_thread_is_created(ruby_target):
    # GIVEN a Ruby with the gem, its sampler, and a sampler thread parked ahead
    target = ruby_target("eight_threads.rb")
    # (one that another test of this process parked is taken first, by a sampler run for nothing)
    taker = new_sampler(open_target(target.pid, wait_s=5), Options())
    taker.start(0.0, True)
    taker.stop()
    assert taker.wait() == "stopped"
    sampler = new_sampler(open_target(target.pid, wait_s=5), Options())
    before = threads_of_this_process()
    _sampler.prepare_thread(True)
    parked = threads_of_this_process() - before
    assert len(parked) == 1, parked
    spare = int(parked.pop())
    assert os.sched_getscheduler(spare) == os.SCHED_FIFO
    _sampler.prepare_thread(True)               # one waits already: no second one
    assert threads_of_this_process() - before == {str(spare)}
    # WHEN the sampler starts
    sampler.start(0.0, True)
    try:
        # THEN no thread was created for it: the parked one ticks, real-time
        assert threads_of_this_process() - before == {str(spare)}
        wait_for(lambda: sampler.stats()["ticks"] >= 50, 60, what="50 ticks")
        assert os.sched_getscheduler(spare) == os.SCHED_FIFO
    finally:
        sampler.stop()
        # AND it ends when stopped, saying why, and its thread is gone
        assert sampler.wait() == "stopped"
    wait_for(lambda: str(spare) not in threads_of_this_process(), 10, what="the sampler thread's end")
    assert sampler.stats()["samples"] >= 50


def test_a_sampler_without_a_parked_thread_starts_one_of_its_own_and_ends_with_the_duration(ruby_target):
    # GIVEN a sampler under the normal scheduler (no thread parked for one: only real-time ones are)
    target = ruby_target("eight_threads.rb")
    sampler = new_sampler(open_target(target.pid, wait_s=5), Options())
    # WHEN it starts for 0.3 s
    t0 = time.monotonic()
    sampler.start(0.3, False)
    # THEN it ends by itself when the duration has passed, with its samples
    assert sampler.wait() == "duration"
    assert time.monotonic() - t0 >= 0.3
    assert sampler.stats()["samples"] > 0
