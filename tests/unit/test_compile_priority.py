"""bcc's compile runs at a low priority so a booting app keeps the CPU, but not for ever: one still
running after its patience goes on at the compiling thread's own priority (an app that keeps every
core busy left a nice-10 compile ~10 % of a CPU: a short recording ended before its names came)."""
from __future__ import annotations

import os
import threading
import time

import pytest

from sdb_sidecar.ebpf.bpfload import COMPILE_NICE, compile_bpf

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="raising a thread's priority back needs root")


def niceness() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def in_thread(fn):
    out = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:       # noqa: B902 (reported by the test)
            out["error"] = e
    t = threading.Thread(target=run)
    t.start()
    t.join(120)
    assert not t.is_alive(), "the compile never ended"
    if "error" in out:
        raise out["error"]
    return out["value"]


def test_a_compile_longer_than_its_patience_goes_on_at_the_threads_own_priority():
    # GIVEN a "compile" that runs until its thread is back at its own priority (at most 60 s)
    seen = []

    def slow_bpf(text, cflags):
        seen.append(niceness())
        deadline = time.monotonic() + 60
        while niceness() != 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        seen.append(niceness())
        return "program"

    def compile_it():
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 0)
        program = compile_bpf(slow_bpf, "", [], patience_s=0.2)
        return program, niceness()

    # WHEN it is compiled with a patience of 0.2 s
    program, after = in_thread(compile_it)
    # THEN it began at COMPILE_NICE and was raised back to the thread's own priority while it ran
    assert program == "program"
    assert seen == [COMPILE_NICE, 0]
    # AND the thread is at its own priority after it
    assert after == 0


def test_a_compile_within_its_patience_runs_low_all_through_and_nothing_touches_the_thread_later():
    # GIVEN a quick "compile"
    seen = []

    def quick_bpf(text, cflags):
        seen.append(niceness())
        return "program"

    def compile_it():
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 0)
        program = compile_bpf(quick_bpf, "", [], patience_s=0.2)
        back = niceness()
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 3)     # the thread's own later choice
        time.sleep(0.6)                                                      # past the patience
        return program, back, niceness()

    program, back, later = in_thread(compile_it)
    # THEN it ran at COMPILE_NICE, the thread got its priority back at its end, and the patience's
    # timer (cancelled) did not change the thread's niceness afterwards
    assert (program, seen, back, later) == ("program", [COMPILE_NICE], 0, 3)
