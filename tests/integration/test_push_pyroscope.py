"""`attach --push pyroscope=URL`: every interval's samples reach a Pyroscope-speaking backend (the
loopback receiver of tests/support/push_receiver.py, which decodes with pprof-format and go tool
pprof) as named wall and CPU profiles, the same samples and names as the local trace, while the
trace is written as without --push; a backend that is down, slow or refusing costs nothing but the
profiles it refuses, each counted, each kind of failure one line."""
from __future__ import annotations

import glob
import subprocess
import sys
from pathlib import Path

import pytest

import otlp_decode
from conftest import SIDECAR, SYMBOLIZE, read_trace, samples_so_far, wait_for

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
from push_receiver import PushReceiver, decode_pprof, free_port_refusing  # noqa: E402

pytestmark = pytest.mark.once       # the sidecar's own work: the same on every Ruby

PUSH_LINE = "sdb: push: "


@pytest.fixture
def receiver():
    r = PushReceiver()
    yield r
    r.close()


def attach(sidecar_process, target, trace, *push_args, seconds):
    return sidecar_process("attach", "--pid", str(target.pid), "-d", str(seconds), "--no-ebpf", "-o", str(trace),
                           *push_args)


def finished(proc, timeout=180):
    out, err = proc.communicate(timeout=timeout)
    assert "Traceback" not in err, err
    return err


def pushed_profiles(receiver, name="wall"):
    """(series labels, decoded pprof) of every profile of __name__ `name` received, in order."""
    out = []
    for rec in receiver.received:
        for labels, raw in rec.profiles():
            if labels.get("__name__") == name:
                out.append((labels, decode_pprof(raw)))
    return out


def local_count(trace, p) -> int:
    """The local trace's samples in the pushed profile's interval [time, time + duration)."""
    h = trace.header
    lo = int(p["timeNanos"]) - h["start_wall_ns"] + h["start_mono_ns"]
    hi = lo + int(p["durationNanos"])
    return sum(1 for s in trace.samples if lo <= s[0] < hi)


def stacks(p) -> set:
    return {(s["labels"]["thread_name"], tuple(s["frames"])) for s in p["samples"]}


def down_then_up(sidecar_process, target, trace, receiver, *push_args, seconds, down_s):
    """A recording that pushes to a backend that is down until the sidecar said so and down_s
    seconds of samples (of the program's 3 threads) are in the trace: (stderr, trace, push counts,
    the one destination's counts, the wall profiles received)."""
    receiver.down()
    proc = attach(sidecar_process, target, trace, "--push", f"pyroscope={receiver.url}", *push_args,
                  seconds=seconds)
    wait_for(lambda: "connection refused" in proc.stderr_so_far(), 60, what="the refused notice")
    wait_for(lambda: samples_so_far(trace) >= 3 * 1000 * down_s, 60, what=f"{down_s} s of samples")
    receiver.up()
    err = finished(proc)
    assert proc.returncode == 0, err
    t = read_trace(trace)
    counts = t.end["push"]
    (dest,) = counts["destinations"].values()
    return err, t, counts, dest, pushed_profiles(receiver)


def test_each_interval_arrives_as_named_profiles_with_the_trace_s_samples(ruby_target, sidecar_process, receiver,
                                                                          tmp_path):
    # GIVEN a program with a busy thread and a blocked one
    target = ruby_target("thread_states.rb")
    trace = tmp_path / "trace.msgpack"
    # WHEN it is recorded for 23 s, pushing every 5 s (cuts at 5, 10, 15, 20 s, and the last at the end)
    proc = attach(sidecar_process, target, trace, "--push", f"pyroscope={receiver.url}", "--push-interval", "5",
                  "--service", "states-svc", seconds=23)
    err = finished(proc)
    assert proc.returncode == 0, err
    assert PUSH_LINE not in err, err
    assert receiver.errors == []
    t = read_trace(trace)
    counts = t.end["push"]
    # THEN five intervals were pushed, each as a wall and a CPU profile of the service
    walls, cpus = pushed_profiles(receiver, "wall"), pushed_profiles(receiver, "process_cpu")
    assert counts["profiles"] == 5 and len(walls) == 5 and len(cpus) == 5, (counts, len(walls), len(cpus))
    (dest,) = counts["destinations"].values()
    assert dest["sent"] == 5 and dest["dropped"] == 0 and dest["retried"] == 0, dest
    assert all(labels == {"service_name": "states-svc", "__name__": "wall"} for labels, _ in walls)
    # AND each wall profile holds the local trace's samples of its interval (2 %), all of them together
    total = 0
    for _, p in walls:
        n = sum(s["value"][0] for s in p["samples"])
        assert abs(n - local_count(t, p)) <= 0.02 * local_count(t, p), (n, local_count(t, p))
        total += n
    assert total == len(t.samples) == counts["samples"]
    # AND its labels are the thread's name, state and the pid; the CPU profile has the running samples only
    for _, p in walls:
        for s in p["samples"]:
            assert s["labels"]["pid"] == str(target.pid)
            assert set(s["labels"]) == {"thread_name", "thread_state", "pid"}, s["labels"]
            if s["labels"]["thread_name"] == "blocked":
                assert s["labels"]["thread_state"] == "blocked"
    for (_, w), (_, c) in zip(walls, cpus):
        assert c["sampleType"] == [["samples", "count"], ["cpu", "nanoseconds"]]
        assert all(s["labels"]["thread_state"] == "running" for s in c["samples"])
        running = sum(s["value"][0] for s in w["samples"] if s["labels"]["thread_state"] == "running")
        assert sum(s["value"][0] for s in c["samples"]) == running > 0
        assert (c["timeNanos"], c["durationNanos"]) == (w["timeNanos"], w["durationNanos"])
    # AND the frames are named as sdb-symbolize names them from the trace
    local = tmp_path / "local.pb.gz"
    r = subprocess.run([*SYMBOLIZE, str(trace), "--format", "pprof", "--idle", "-o", str(local)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    want = stacks(decode_pprof(local.read_bytes()))
    got = set().union(*(stacks(p) for _, p in walls))
    assert got == want
    assert any("busy_loop" in " ".join(frames) for _, frames in got), got


def test_ingest_endpoint_gets_each_profile_with_its_interval(ruby_target, sidecar_process, receiver, tmp_path):
    # GIVEN a program recorded for 5 s, pushing every 2 s to the older /ingest endpoint
    target = ruby_target("thread_states.rb")
    trace = tmp_path / "trace.msgpack"
    proc = attach(sidecar_process, target, trace, "--push", f"pyroscope={receiver.url}", "--push-ingest",
                  "--push-interval", "2", seconds=5)
    err = finished(proc)
    assert proc.returncode == 0 and PUSH_LINE not in err, err
    t = read_trace(trace)
    # THEN each request names the service and profile kind, with its interval and rate, and the wall
    # profiles hold every sample of the trace
    assert receiver.errors == [] and receiver.received
    total = 0
    for rec in receiver.received:
        q = rec.query
        assert q["name"] in ("thread_states.wall", "thread_states.cpu"), q
        assert q["spyName"] == "sdb" and q["sampleRate"] == "1000" and int(q["from"]) <= int(q["until"])
        p = decode_pprof(rec.raw)
        if q["name"].endswith(".wall"):
            total += sum(s["value"][0] for s in p["samples"])
    assert total == len(t.samples)


def test_backend_down_then_up_loses_nothing_within_the_queue(ruby_target, sidecar_process, receiver, tmp_path):
    # GIVEN a backend that is down when the recording starts
    target = ruby_target("thread_states.rb")
    trace = tmp_path / "trace.msgpack"
    # WHEN it comes up once the sidecar found it down and 4 s of samples are in the trace
    err, t, counts, dest, walls = down_then_up(sidecar_process, target, trace, receiver, "--push-interval", "2",
                                               seconds=14, down_s=4)
    # THEN every interval arrived (retried), none dropped, and the refusal was said once
    assert dest["dropped"] == 0 and dest["retried"] >= 1 and dest["sent"] == counts["profiles"] == len(walls), dest
    assert sum(sum(s["value"][0] for s in p["samples"]) for _, p in walls) == len(t.samples)
    assert sum(1 for line in err.splitlines() if line.startswith(PUSH_LINE)) == 1, err


def test_backend_down_beyond_the_queue_drops_the_oldest_and_counts_them(ruby_target, sidecar_process, receiver,
                                                                        tmp_path):
    # GIVEN a backend that is down, and a queue that holds about one interval's request (a few KiB)
    target = ruby_target("thread_states.rb")
    trace = tmp_path / "trace.msgpack"
    # WHEN it comes up once the sidecar found it down and 8 s of samples (8 intervals) are in the trace
    err, t, counts, dest, walls = down_then_up(sidecar_process, target, trace, receiver, "--push-interval", "1",
                                               "--push-queue", "0.006", seconds=16, down_s=8)
    # THEN what was received and what was dropped add up to every interval, and some were dropped
    assert dest["sent"] == len(walls)
    assert dest["sent"] + dest["dropped"] == counts["profiles"], dest
    assert dest["dropped_queue_full"] >= 1, dest
    # the newest intervals are the ones kept: the last received is the last cut
    last = max(int(p["timeNanos"]) for _, p in walls)
    assert t.samples[-1][0] - t.header["start_mono_ns"] + t.header["start_wall_ns"] >= last
    assert f"{dest['dropped']} dropped" in err, err


def test_a_backend_that_never_answers_times_out_and_the_recording_goes_on(ruby_target, sidecar_process, receiver,
                                                                          tmp_path):
    # GIVEN a backend that accepts every request and never answers
    target = ruby_target("thread_states.rb")
    trace = tmp_path / "trace.msgpack"
    receiver.hang = True
    proc = attach(sidecar_process, target, trace, "--push", f"pyroscope={receiver.url}", "--push-interval", "1",
                  "--push-timeout", "2", seconds=8)
    err = finished(proc)
    # THEN the recording ended as asked, its trace whole, each tick sampled every thread
    assert proc.returncode == 0, err
    t = read_trace(trace)
    assert t.end["reason"] == "duration"
    assert len(t.samples) == t.end["samples"]
    # (every tick reads the three threads: a read is a sample, or torn, or an error)
    assert t.end["samples"] + t.end["torn"] + t.end["errors"] >= 3 * t.end["ticks"] - 3, t.end
    # AND the timeout was said once, and nothing counted sent
    assert sum(1 for line in err.splitlines() if "no answer within the timeout" in line) == 1, err
    (dest,) = t.end["push"]["destinations"].values()
    assert dest["sent"] == 0 and dest["dropped"] == t.end["push"]["profiles"] and receiver.requests >= 1, dest


FAILURES = {
    # answer -> (what the line says, retried)
    401: ("HTTP 401", False),
    413: ("HTTP 413", False),
    429: ("HTTP 429", True),
    500: ("HTTP 500", True),
}


@pytest.mark.parametrize("status", sorted(FAILURES))
def test_each_http_failure_is_one_line_and_retried_only_where_it_can_help(ruby_target, sidecar_process, receiver,
                                                                          tmp_path, status):
    target = ruby_target("thread_states.rb")
    trace = tmp_path / "trace.msgpack"
    receiver.status = status
    receiver.retry_after = "1" if status == 429 else None
    proc = attach(sidecar_process, target, trace, "--push", f"pyroscope={receiver.url}", "--push-interval", "1",
                  seconds=4)
    err = finished(proc)
    assert proc.returncode == 0, err
    said, retried = FAILURES[status]
    lines = [line for line in err.splitlines() if line.startswith(PUSH_LINE)]
    assert len(lines) == 1 and said in lines[0], err
    (dest,) = read_trace(trace).end["push"]["destinations"].values()
    assert dest["sent"] == 0 and (dest["retried"] > 0) == retried, dest
    assert receiver.requests >= 1


@pytest.mark.parametrize("case", ["unreachable", "tls"])
def test_unreachable_host_and_tls_failure_are_one_line(ruby_target, sidecar_process, receiver, tmp_path, case):
    target = ruby_target("thread_states.rb")
    trace = tmp_path / "trace.msgpack"
    url = f"http://127.0.0.1:{free_port_refusing()}" if case == "unreachable" else f"https://127.0.0.1:{receiver.port}"
    proc = attach(sidecar_process, target, trace, "--push", f"pyroscope={url}", "--push-interval", "1", seconds=3)
    err = finished(proc)
    assert proc.returncode == 0, err
    lines = [line for line in err.splitlines() if line.startswith(PUSH_LINE)]
    assert len(lines) == 1, err
    assert ("connection refused" if case == "unreachable" else "TLS") in lines[0], lines
    (dest,) = read_trace(trace).end["push"]["destinations"].values()
    assert dest["sent"] == 0 and dest["dropped"] == read_trace(trace).end["push"]["profiles"], dest


@pytest.mark.parametrize("value", ["ftp://host", "pyroscope=ftp://host", "pyroscope=http://", "zipkin=http://h"])
def test_a_bad_push_argument_is_one_line_and_exit_code_2(ruby_target, tmp_path, value):
    target = ruby_target("thread_states.rb")
    r = subprocess.run([*SIDECAR, "attach", "--pid", str(target.pid), "-d", "1", "-o", str(tmp_path / "t.msgpack"),
                        "--push", value], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("sdb-sidecar: error: --push"), r.stderr
    assert not (tmp_path / "t.msgpack").exists()


def test_the_real_pyroscope_client_s_push_decodes_in_the_same_receiver(receiver):
    # GIVEN the real Pyroscope client (pyroscope-io: Pyroscope's Rust agent, as its Ruby gem uses it)
    # profiling a Python program that crunches numbers for 3 s, then shuts down (which flushes)
    prog = ("import time, pyroscope\n"
            f"pyroscope.configure(application_name='pyapp', server_address='{receiver.url}', tags={{'region': 'x'}})\n"
            "def crunch_numbers():\n"
            "    return sum(range(10**6))\n"
            "t = time.time()\n"
            "while time.time() - t < 3:\n"
            "    crunch_numbers()\n"
            "pyroscope.shutdown()\n")
    r = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    # THEN what it pushed is accepted and decoded by the code that decodes sdb's pushes
    assert receiver.errors == [] and receiver.received, receiver.errors
    profiles = [(labels, decode_pprof(raw)) for rec in receiver.received for labels, raw in rec.profiles()]
    assert all(rec.endpoint == "push" for rec in receiver.received)
    assert {(labels["service_name"], labels["__name__"], labels["region"]) for labels, _ in profiles} == \
        {("pyapp", "process_cpu", "x")}
    frames = {f for _, p in profiles for s in p["samples"] for f in s["frames"]}
    assert "crunch_numbers" in frames, frames


def test_with_rotation_every_file_s_samples_are_pushed_once(ruby_target, sidecar_process, receiver, tmp_path):
    # GIVEN a recording rotated every 5 s, pushing every 2 s (cuts that see two files at once)
    target = ruby_target("thread_states.rb")
    stem = tmp_path / "rot"
    proc = attach(sidecar_process, target, f"{stem}.msgpack", "--rotate", "5s", "--push", f"pyroscope={receiver.url}",
                  "--push-interval", "2", seconds=13)
    err = finished(proc)
    assert proc.returncode == 0 and PUSH_LINE not in err, err
    files = sorted(glob.glob(f"{stem}.*.msgpack"))
    assert len(files) >= 3, files
    # THEN the pushed wall profiles hold every sample of every file, once
    total = sum(len(read_trace(f).samples) for f in files)
    walls = pushed_profiles(receiver)
    assert sum(sum(s["value"][0] for s in p["samples"]) for _, p in walls) == total
    (dest,) = read_trace(files[-1]).end["push"]["destinations"].values()
    assert dest["sent"] == read_trace(files[-1]).end["push"]["profiles"] and dest["dropped"] == 0, dest


def test_otlp_push_sends_each_interval_with_the_trace_s_samples_and_names(ruby_target, sidecar_process, receiver,
                                                                          tmp_path):
    # GIVEN a program recorded for 11 s, pushing OTLP profiles every 5 s (cuts at 5, 10 s and the end)
    target = ruby_target("thread_states.rb")
    trace = tmp_path / "trace.msgpack"
    proc = attach(sidecar_process, target, trace, "--push", f"otlp={receiver.url}", "--push-interval", "5",
                  "--service", "otlp-svc", seconds=11)
    err = finished(proc)
    assert proc.returncode == 0 and PUSH_LINE not in err, err
    t = read_trace(trace)
    counts = t.end["push"]
    # THEN three requests arrived at /v1development/profiles, decoded by the official generated classes
    assert receiver.errors == []
    assert [rec.endpoint for rec in receiver.received] == ["otlp"] * 3 and counts["profiles"] == 3, counts
    got_times, got_stacks = [], set()
    for rec in receiver.received:
        otlp_decode.check_dictionary(rec.otlp)
        for rp in rec.otlp.resource_profiles:
            attrs = otlp_decode.resource_attributes(rp)
            assert attrs["service.name"] == "otlp-svc" and attrs["process.pid"] == target.pid, attrs
        for s in otlp_decode.samples(rec.otlp):
            if s.type == "wall":
                got_times += s.timestamps
                got_stacks.add((s.attributes.get("thread.name"), s.frames))
    # AND their wall samples are the trace's, each at its moment, none twice
    h = t.header
    assert sorted(got_times) == sorted(x[0] - h["start_mono_ns"] + h["start_wall_ns"] for x in t.samples)
    # AND named as sdb-symbolize names them in its OTLP profile of the trace
    local = tmp_path / "local.otlp"
    r = subprocess.run([*SYMBOLIZE, str(trace), "--format", "otlp", "--idle", "-o", str(local)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    want = {(s.attributes.get("thread.name"), s.frames)
            for s in otlp_decode.samples(otlp_decode.decode(local.read_bytes())) if s.type == "wall"}
    assert got_stacks == want
