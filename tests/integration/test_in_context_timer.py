"""The in-context reads' timer follows the recorded threads (threadtimers.py, incontext.py): a cpu-clock
perf event on each thread the registry lists, which fires only while that thread runs, on its CPU.
The timer used to be the same event on every CPU: each CPU of the machine took ~1,070 more local
timer interrupts a second while a recording ran, whether or not it ran a recorded thread
(benchmarks/RESULTS.md, "The reads' timer: per CPU or per thread")."""
from __future__ import annotations

import os
import signal
import time

import pytest

from conftest import ebpf_missing, read_trace, wait_for
from ebpf_wait import wait_for_ebpf
from sdb_sidecar.ebpf.incontext import MAX_RATE_HZ, MAX_TIMERS, OVERSAMPLE

pytestmark = [pytest.mark.ebpf, pytest.mark.skipif(bool(ebpf_missing()), reason=f"no eBPF here: {ebpf_missing()}")]
CPUS = sorted(os.sched_getaffinity(0))
WINDOW_S = 2.0


def local_timer_interrupts() -> dict:
    """CPU number -> its local timer interrupts so far (/proc/interrupts, LOC)."""
    with open("/proc/interrupts") as f:
        cpus = [int(c[3:]) for c in f.readline().split()]
        for line in f:
            parts = line.split()
            if parts and parts[0] == "LOC:":
                return dict(zip(cpus, (int(x) for x in parts[1:1 + len(cpus)])))
    pytest.skip("no LOC line in /proc/interrupts here")


def loc_rate(cpu: int, seconds: float = WINDOW_S) -> float:
    a = local_timer_interrupts()[cpu]
    time.sleep(seconds)
    return (local_timer_interrupts()[cpu] - a) / seconds


def pin(pid: int, cpu: int) -> None:
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(tid), {cpu})


def perf_event_fds(pid: int) -> int:
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            n += os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:[perf_event]"
        except OSError:
            pass
    return n


@pytest.mark.once
@pytest.mark.skipif(len(CPUS) < 2, reason="needs two CPUs: one runs the recording, the other is watched")
def test_a_cpu_that_runs_no_recorded_thread_takes_no_interrupt_from_the_in_context_reads(ruby_target,
                                                                                           sidecar_process, tmp_path):
    # GIVEN a program asleep ~98 % of the time, it and the sidecar pinned to one CPU, another CPU watched
    busy_cpu, watched = CPUS[0], CPUS[1]
    target = ruby_target("mostly_asleep.rb")
    pin(target.pid, busy_cpu)
    before = min(loc_rate(watched) for _ in range(2))
    # WHEN it is recorded at 1 kHz with the in-context reads in
    trace = tmp_path / "trace.msgpack"
    sidecar = sidecar_process("attach", "--pid", str(target.pid), "-o", str(trace), "--duration", "600", "-q",
                              prefix=["taskset", "-c", str(busy_cpu)])
    wait_for_ebpf(sidecar, trace)       # the reads are attached before the symbolizer
    time.sleep(0.5)
    during = [loc_rate(watched) for _ in range(3)]
    sidecar.send_signal(signal.SIGINT)
    _, err = sidecar.communicate(timeout=60)
    assert sidecar.returncode == 0, err
    after = min(loc_rate(watched) for _ in range(2))
    end = read_trace(trace).end
    # THEN the reads were in, and read the program's thread in its bursts on its own CPU
    assert end["in_context_since_ns"] > 0 and end["in_context"] > 0, end
    assert end["in_context_untimed"] == 0, end
    # AND the watched CPU took no more timer interrupts than without the recording: a timer on every
    # CPU gave it ~rate more a second (1,070 here: measured +1,060 with it, ~0 without). The verdict
    # is half that rate, and the quietest window of each phase is compared (other work on the
    # machine only adds interrupts, to some windows)
    rate = MAX_RATE_HZ * OVERSAMPLE
    extra = min(during) - min(before, after)
    assert extra < rate / 2, (f"the watched CPU {watched} took {extra:.0f} more local timer interrupts a second "
                              f"while recording (before {before:.0f}/s, during {during}, after {after:.0f}/s)")


def test_many_threads_and_churn_keep_the_timers_bounded_and_leak_none(ruby_target, sidecar_process, tmp_path):
    # GIVEN a program that starts 200 threads, ends them, then makes and joins 4,000 more
    target = ruby_target("thread_crowd.rb")
    trace = tmp_path / "trace.msgpack"
    # the sidecar's perf events are the timers, the GC mover's probe (all along) and, during a pause of
    # the creation probes, a warm-up probe (uprobe_link.warm): no pause here, so that the counts below
    # are of the timers and that one probe
    sidecar = sidecar_process("attach", "--pid", str(target.pid), "-o", str(trace), "--duration", "600", "-q",
                              "--ebpf-max-rate", "0")
    wait_for_ebpf(sidecar, trace)       # the reads (and the main thread's timer) are in before it
    calm = perf_event_fds(sidecar.pid)
    assert calm >= 1
    # WHEN the 200 threads run
    target.send("crowd 200\n")
    target.wait_for_line("crowd 200")
    # THEN the timers go on them up to the bound, and no further
    wait_for(lambda: perf_event_fds(sidecar.pid) >= calm - 1 + MAX_TIMERS or sidecar.poll() is not None, 120,
             what=f"{MAX_TIMERS} timers")
    seen = [perf_event_fds(sidecar.pid) for _ in range(10) if time.sleep(0.1) is None]
    assert max(seen) <= calm - 1 + MAX_TIMERS, (calm, seen)
    # WHEN they end, and 4,000 threads come and go
    target.send("calm\n")
    target.wait_for_line("calm")
    target.send("churn 4000\n")
    target.wait_for_line("churned 4000", timeout=300)
    # THEN every timer but the main thread's is closed again, and the main thread's stays: it is never
    # closed while its thread lives (a timer closed and opened again at each drain was counted missing)
    wait_for(lambda: perf_event_fds(sidecar.pid) <= calm or sidecar.poll() is not None, 60,
             what="the timers of the ended threads closed")
    assert [perf_event_fds(sidecar.pid) for _ in range(50) if time.sleep(0.02) is None] == [calm] * 50
    sidecar.send_signal(signal.SIGINT)
    _, err = sidecar.communicate(timeout=60)
    assert sidecar.returncode == 0, err
    end = read_trace(trace).end
    # AND the threads beyond the bound were counted as read from outside only
    assert end["threads"] >= 201, end
    assert 200 + 1 - MAX_TIMERS <= end["in_context_untimed"] < end["threads"], end
    assert end["in_context"] > 0, end
