"""Recording a program with eight threads made every way Ruby makes them, for 5 s at 1000 Hz.

One recording (module-scoped) feeds every test here: the program is
tests/programs/eight_threads.rb (see its header for the threads and the protocol).
"""
from __future__ import annotations

import subprocess
import time

import pytest

from conftest import (PROGRAMS, REPO, SDB_RUBY, SIDECAR, ruby_cmd, RubyTarget, read_registry, read_trace, ruby_env,
                      wait_for)

pytestmark = pytest.mark.every_ruby

DURATION_S = 5
RUBY_VERSION = tuple(int(x) for x in subprocess.run([SDB_RUBY, "-e", "print RUBY_VERSION"], capture_output=True,
                                                    text=True, check=True).stdout.split(".")[:2])
RATE_HZ = 1000
WHOLE_RECORDING = ["eight_main", "adopted_thread", "new_thread", "start_thread", "fork_thread",
                   "fiber_thread", "busy_thread"]
ENDING_MIDWAY = ["doomed_thread", "raising_thread"]
ALL_NAMES = WHOLE_RECORDING + ENDING_MIDWAY


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    """Runs the program, records it, and returns what every test looks at:
    the trace, the registry as read at "ready" and after "ended", and the sidecar's result."""
    # module scope: the function-scoped factories cannot be used, so start the processes here
    tmp = tmp_path_factory.mktemp("eight")
    out = tmp / "trace.msgpack"
    stderr_path = tmp / "eight_threads.stderr"
    with open(stderr_path, "w") as err:
        proc = subprocess.Popen(ruby_cmd(PROGRAMS / "eight_threads.rb"), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=err, text=True, cwd=str(tmp), env=ruby_env())
    target = RubyTarget(proc, "eight_threads.rb", stderr_path)
    sidecar = None
    try:
        target.wait_for_line("ready")
        at_ready = read_registry(target.registry)

        # WHEN the sidecar records for 5 s, and the program is told to go once the trace has begun
        sidecar = subprocess.Popen([*SIDECAR, "attach", "--pid", str(target.pid), "--rate", str(RATE_HZ),
                                    "--duration", str(DURATION_S), "-o", str(out), "--quiet"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(REPO))
        wait_for(lambda: out.exists() and out.stat().st_size > 0 or sidecar.poll() is not None, 10,
                 what="the sidecar to write the trace header")
        time.sleep(0.2)
        target.send("go\n")
        target.wait_for_line("ended", timeout=10)
        after_end = read_registry(target.registry)
        try:
            stdout, stderr = sidecar.communicate(timeout=DURATION_S + 20)
        except subprocess.TimeoutExpired:
            sidecar.kill()
            stdout, stderr = sidecar.communicate()
            raise AssertionError(f"a {DURATION_S} s recording did not end within {DURATION_S + 20} s; "
                                 f"sidecar stderr: {stderr!r}") from None
        # one more thread registers only once the recording is over: no registration can hand back the
        # ended threads' slots while the sidecar records, so their thread_end records can come only
        # from its own reads of them (on Ruby 3.1, of th->status)
        target.send("spawn\n")
        target.wait_for_line("spawned", timeout=10)
        after_spawn = read_registry(target.registry)
        alive_after = target.alive()
    finally:
        if sidecar is not None and sidecar.poll() is None:
            sidecar.kill()
            sidecar.communicate()
        target.cleanup()
    assert sidecar.returncode == 0, f"sidecar exited {sidecar.returncode}: {stderr}"
    assert alive_after, f"the target died during the recording: {target.stderr()}"
    return {"trace": read_trace(out), "at_ready": at_ready, "after_end": after_end, "after_spawn": after_spawn,
            "sidecar_stderr": stderr, "target_stderr": target.stderr()}


def live_serial(registry: dict, name: str) -> int:
    found = [s for s in registry["slots"] if s["live"] == 1 and s["name"] == name]
    assert len(found) == 1, f"expected one live slot named {name!r}, got {found}"
    return found[0]["serial"]


def test_every_thread_is_registered_with_its_name_before_recording(recording):
    # GIVEN the program printed "ready" THEN the registry holds one live slot per thread, named
    reg = recording["at_ready"]
    live_names = sorted(s["name"] for s in reg["slots"] if s["live"] == 1)
    assert live_names == sorted(ALL_NAMES)


def test_end_record_reports_duration_reason_and_integer_counts(recording):
    end = recording["trace"].end
    assert end is not None, "no end record"
    assert end["reason"] == "duration"
    for key in ("ticks", "late", "samples", "torn", "retried", "errors", "threads"):
        assert isinstance(end.get(key), int), f"end record key {key!r}: {end.get(key)!r}"
    # a 5 s recording at 1000 Hz is ~5000 periods: each a tick taken, or missed and counted (never
    # bunched to catch up); how many are missed depends on the machine's load, their sum does not.
    # The 95% rule below is relative to the ticks actually taken
    assert 0.98 * DURATION_S * RATE_HZ <= end["ticks"] + end["missed"] <= 1.02 * DURATION_S * RATE_HZ, end
    assert end["samples"] == len(recording["trace"].samples)


def test_every_thread_name_appears_in_thread_records(recording):
    trace = recording["trace"]
    seen = {n for names in trace.thread_names.values() for n in names}
    missing = [n for n in ALL_NAMES if n not in seen]
    assert not missing, f"names missing from thread records: {missing}; seen {seen}"


@pytest.mark.parametrize("name", WHOLE_RECORDING)
def test_thread_alive_for_whole_recording_gets_95_percent_of_expected_samples(recording, name):
    # GIVEN a thread alive from before the recording to after it (the busy one included)
    trace = recording["trace"]
    serial = trace.serial_named(name)
    expected = trace.end["ticks"]
    got = len(trace.samples_of(serial))
    # THEN it was sampled at (almost) every tick
    assert got >= 0.95 * expected, f"{name}: {got} samples of {expected} ticks ({100 * got / expected:.1f}%)"


@pytest.mark.parametrize("name", ENDING_MIDWAY)
def test_thread_ending_midway_has_samples_and_a_thread_end_record(recording, name):
    trace = recording["trace"]
    serial = trace.serial_named(name)
    samples = trace.samples_of(serial)
    assert samples, f"{name} has no samples"
    # it ended ~2 s after "go", before the recording did (the main thread goes on being sampled)
    assert serial in trace.thread_ends, f"no thread_end record for {name} (serial {serial})"
    end_ns = trace.thread_ends[serial]["at_ns"]
    main = trace.samples_of(trace.serial_named("eight_main"))
    assert any(s[0] > end_ns for s in main), "the recording ended with the thread"
    # and it was sampled while it lived, never after: no more samples than the main thread's
    # (sampled at every tick) up to its thread_end record, none later
    last_own = max(s[0] for s in samples)
    assert last_own <= end_ns, "samples of the thread after its thread_end"
    assert len(samples) <= len([s for s in main if s[0] <= end_ns]) + 2, (len(samples), len(main))
    # AND the thread_end came from the sidecar's own reads of the thread (Ruby 3.1 sends no event for
    # an end by a kill or an exception: there the sidecar reads the end from th->status), not from
    # the slot handed back when another thread registers: no thread registered during the recording
    # after the nine (the fixture starts one more only once the sidecar has exited), so a sidecar that
    # learnt ends only from hand-backs would write none. How many ticks after its last sample the end
    # came is not asserted: the dying thread waits for the GVL that busy_thread holds, as long as
    # Ruby's scheduling and the machine's load make it
    assert len(trace.thread_names) == len(ALL_NAMES), f"threads other than the program's nine: {trace.thread_names}"


def test_reads_of_ended_threads_do_not_fail(recording):
    # GIVEN two threads that ended midway THEN at most a read or two per ended thread failed (one
    # that raced the end); a dead thread read again and again would count an error at every tick
    assert recording["trace"].end["errors"] <= 2 * len(ENDING_MIDWAY), recording["trace"].end


@pytest.mark.parametrize("name", ENDING_MIDWAY)
def test_thread_ending_midway_frees_its_registry_slot(recording, name):
    # GIVEN the thread's serial while it lived
    serial = live_serial(recording["at_ready"], name)
    # WHEN it was killed / raised THEN its slot is free (live == 0) or holds another serial: at once
    # where Ruby tells the gem of every thread's end (3.2+); on 3.1, which sends no event for an end
    # by a kill or an exception, once the next thread has registered (the trace ended it at once:
    # test_thread_ending_midway_has_samples_and_a_thread_end_record)
    registry = recording["after_end"] if RUBY_VERSION >= (3, 2) else recording["after_spawn"]
    slots = [s for s in registry["slots"] if s["serial"] == serial]
    assert all(s["live"] == 0 for s in slots), f"{name}'s slot still live after it ended: {slots}"


@pytest.mark.parametrize("name,method", [
    ("new_thread", "new_thread_park"), ("start_thread", "start_thread_park"),
    ("fork_thread", "fork_thread_park"), ("adopted_thread", "adopted_park"),
    ("busy_thread", "busy_work"), ("doomed_thread", "doomed_park"), ("raising_thread", "raising_wait"),
])
def test_thread_samples_show_its_own_method(recording, name, method):
    trace = recording["trace"]
    samples = trace.samples_of(trace.serial_named(name))
    with_method = [s for s in samples if method in trace.labels_of(s)]
    assert len(with_method) >= 0.9 * len(samples), (
        f"{name}: {len(with_method)} of {len(samples)} samples show {method}")


def test_fiber_thread_samples_show_the_running_fibers_frames(recording):
    # GIVEN a thread switching between two fibers, each in its own method
    trace = recording["trace"]
    samples = trace.samples_of(trace.serial_named("fiber_thread"))
    alpha = [s for s in samples if "fiber_alpha_work" in trace.labels_of(s)]
    beta = [s for s in samples if "fiber_beta_work" in trace.labels_of(s)]
    # THEN both fibers' methods are seen, each about half the time...
    assert len(alpha) > 0.2 * len(samples), (len(alpha), len(samples))
    assert len(beta) > 0.2 * len(samples), (len(beta), len(samples))
    # ...and no sample mixes them (the running fiber's stack, never a stale one)
    both = [trace.labels_of(s) for s in samples
            if "fiber_alpha_work" in trace.labels_of(s) and "fiber_beta_work" in trace.labels_of(s)]
    assert not both, f"{len(both)} samples show both fibers, e.g. {both[0]}"


def test_busy_thread_samples_show_its_loop_of_method_calls(recording):
    trace = recording["trace"]
    samples = trace.samples_of(trace.serial_named("busy_thread"))
    in_step = [s for s in samples if "busy_step" in trace.labels_of(s)]
    assert in_step, "busy_step (the method called in the loop) never sampled"


def test_adopted_thread_record_has_the_adopted_flag(recording):
    trace = recording["trace"]
    adopted = trace.threads[trace.serial_named("adopted_thread")]
    main = trace.threads[trace.serial_named("eight_main")]
    assert adopted["flags"] & 2, adopted
    assert main["flags"] & 1 and main["flags"] & 2, main
    new = trace.threads[trace.serial_named("new_thread")]
    assert not new["flags"] & 3, new

