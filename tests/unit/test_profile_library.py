"""Profiles as a library (sdb_symbolize.profile): every format rendered from samples in memory (a
MemoryTrace that kept them, as the sidecar's Drainer writes them) is byte for byte the profile of
the same samples' trace file, and both are what the sdb-symbolize command writes. On a trace
written by hand, so every record kind that changes an output is there: two processes, threads with
hostile names, an address named twice (names by time), a C method, requests, a label, windows,
ticks (GVL blame), an eBPF pause, every thread state."""
from __future__ import annotations

import subprocess
import sys

import pytest

from sdb_symbolize.options import ProfileOptions, UsageError
from sdb_symbolize.profile import render, render_bytes, write_profile
from sdb_symbolize.reporters import REPORTERS
from sdb_symbolize.samples import FilterError
from sdb_trace import (KIND_CFUNC, KIND_RUBY, STATE_BLOCKED, STATE_GVL_WAIT, STATE_RUNNING, MemoryTrace, TraceFile,
                       TraceWriter)

START = 5_000_000_000
MS = 1_000_000
HEADER = {"pid": 300, "ruby": "3.4.5", "ruby_description": "ruby 3.4.5", "layout": "3.4", "rate_hz": 1000,
          "start_mono_ns": START, "start_wall_ns": 1_700_000_000_000_000_000, "hostname": "h",
          "sdb_version": "0.1.0", "command": ["puma", "master"], "max_depth": 2048}


def write_recording(w: TraceWriter) -> None:
    """The same records into any writer: a file's TraceWriter or a MemoryTrace."""
    w.process(0, pid=300, ppid=1, parent=-1, command=["puma", "master"], at_ns=START)
    master, worker = w.for_process(0), w.for_process(1)
    master.thread(1, 300, "", START, 1, START)
    master.thread(2, 301, "héllo \x1b[31m\u202e", START, 0, START)          # a name the app chose
    master.iseq(0x1000, "wait_workers", "wait_workers", "/app/puma.rb", None, 5, 1, START)
    master.iseq(0x2000, "block in run", "run", "/app/run.rb", None, 9, 2, START)
    master.iseq(0x2000, "other", "other", "/app/other.rb", None, 3, 1, START + 20 * MS)   # the address reused
    master.method(0x3000, "sleep", 1, "Kernel", False, START)
    master.frames(0, [KIND_RUBY, KIND_RUBY, KIND_CFUNC], [0x1000, 0x2000, 0], [0x1010, 0x2010, 0],
                  [0, 0, 0x3000], [7, 11, 0])
    master.stacks(0, [[0], [0, 1], [0, 1, 2]])
    master.spans([1, 1, 2, 2, 1, 2], [1, 2, 2, 1, 3, 3], [0, 1, 1, 0, 0, 0], [1, 1, 1, 1, 2, 2],
                 [START + 2 * MS, START + 4 * MS, START + 8 * MS, START + 30 * MS, START + 5 * MS, START + 9 * MS],
                 [1, 3, 3, 1, 2, 2], [None, "step", "step", "ProductsController#index", "HardJob", "HardJob"],
                 [0, 0, 0, 200, 0, 0], [None, None, None, "req-1", None, "jid-7"])
    master.ebpf_pause(START + 35 * MS, 5000, 1.0)
    master.ebpf_resume(START + 38 * MS)
    n = 40
    master.samples(START, [i * MS for i in range(n)], [1] * n, [i % 3 for i in range(n)],
                   [(STATE_RUNNING, STATE_GVL_WAIT, STATE_BLOCKED, 0)[i % 4] for i in range(n)],
                   win_us=[i % 5 for i in range(n)], span=[1 if 2 <= i < 30 else (2 if i == 10 else 0) for i in range(n)],
                   tick=[i // 2 + 1 for i in range(n)])
    master.samples(START, [i * MS + 1 for i in range(n)], [2] * n, [(i + 1) % 3 for i in range(n)],
                   [(STATE_GVL_WAIT, STATE_RUNNING)[i % 2] for i in range(n)],
                   win_us=[3] * n, span=[3 if 5 <= i < 9 else 0 for i in range(n)], tick=[i // 2 + 1 for i in range(n)])
    w.process(1, pid=301, ppid=300, parent=0, command=["puma: cluster worker 0"], at_ns=START + 2 * MS)
    worker.thread(1, 302, "", START, 1, START)
    worker.iseq(0x1000, "serve", "serve", "/app/server.rb", None, 10, 1, START)
    worker.frames(0, [KIND_RUBY], [0x1000], [0x1020], [0], [12])
    worker.stacks(0, [[0]])
    worker.samples(START, [i * MS for i in range(30)], [1] * 30, [0] * 30, [STATE_RUNNING] * 30)
    master.thread_end(2, START + 45 * MS)
    w.process_end(1, at_ns=START + 40 * MS, reason="exited", samples=30)
    w.end(at_ns=START + 50 * MS, reason="duration", ticks=50, late=0, missed=0, samples=110, torn=0,
          retried=0, errors=0, threads=3, symbol_errors=0)


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    path = tmp_path_factory.mktemp("library") / "trace.msgpack"
    with open(path, "wb") as f:
        write_recording(TraceWriter(f, HEADER))
    memory = MemoryTrace(HEADER, keep_samples=True)
    write_recording(memory)
    return path, memory


VARIANTS = [ProfileOptions(format=fmt) for fmt in sorted(REPORTERS)] + [
    ProfileOptions(format=fmt, idle=True, states=True) for fmt in sorted(REPORTERS)] + [
    ProfileOptions(format="collapsed", by="endpoint", lines=False),
    ProfileOptions(format="speedscope", by="request", merge_processes=True),
    ProfileOptions(format="pprof", pids=(300,), labels="ruby-profile-frames"),
    ProfileOptions(format="json", json_frames=True, threads=("301",), from_s=0.005, to_s=0.030),
    ProfileOptions(format="firefox", endpoints=("ProductsController#index",), slower_than_ms=1),
    ProfileOptions(compare_slow=True, endpoints=("ProductsController#index", "HardJob"), slower_than_ms=10),
]


@pytest.mark.parametrize("options", VARIANTS, ids=lambda o: f"{'compare-slow' if o.compare_slow else o.format}"
                         f"{'-idle-states' if o.states else ''}{'-' + o.by if o.by else ''}"
                         f"{'-filtered' if o.pids or o.threads or o.endpoints else ''}")
def test_every_format_from_samples_in_memory_is_the_trace_files_byte_for_byte(sources, options):
    # GIVEN the same records written to a trace file and kept in memory (no file)
    path, memory = sources
    # WHEN each is rendered by the library with the same options
    from_file = render_bytes(TraceFile(str(path)), options)
    from_memory = render_bytes(memory, options)
    # THEN the two profiles are the same bytes, and not empty
    assert from_file == from_memory
    assert len(from_file) > 20


@pytest.mark.parametrize("fmt", sorted(REPORTERS))
def test_the_sdb_symbolize_command_writes_what_the_library_renders(sources, fmt, tmp_path):
    # GIVEN the trace file, WHEN sdb-symbolize writes its profile to a file and to stdout
    path, memory = sources
    out = tmp_path / f"profile.{fmt}"
    r = subprocess.run([sys.executable, "-m", "sdb_symbolize.cli", str(path), "--format", fmt, "-o", str(out),
                        "--idle"], capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    r2 = subprocess.run([sys.executable, "-m", "sdb_symbolize.cli", str(path), "--format", fmt, "--idle"],
                        capture_output=True, timeout=60)
    assert r2.returncode == 0, r2.stderr
    # THEN both are the library's profile of the samples in memory
    want = render_bytes(memory, ProfileOptions(format=fmt, idle=True))
    assert out.read_bytes() == want
    assert r2.stdout == want


def test_write_profile_replaces_the_file_whole_and_a_bad_filter_leaves_it_alone(sources, tmp_path):
    # GIVEN a file at the output path
    _, memory = sources
    out = tmp_path / "p.collapsed"
    out.write_text("before\n")
    # WHEN a profile whose filter matches no thread is asked for
    with pytest.raises(FilterError, match="no such thread"):
        write_profile(memory, ProfileOptions(threads=("nobody",)), str(out))
    # THEN the file is as it was, and nothing else was left in the folder
    assert out.read_text() == "before\n" and [p.name for p in tmp_path.iterdir()] == ["p.collapsed"]
    # AND a good one replaces it, and says what it handed over
    result = write_profile(memory, ProfileOptions(idle=True), str(out))
    assert out.read_bytes() == render_bytes(memory, ProfileOptions(idle=True))
    assert result.samples_in == 110 and result.samples_out == 110


def test_options_that_make_no_sense_are_refused_as_one_value():
    with pytest.raises(UsageError, match="--compare-slow needs"):
        ProfileOptions(compare_slow=True)
    with pytest.raises(UsageError, match="by="):
        ProfileOptions(by="thread")
    with pytest.raises(UsageError, match="labels="):
        ProfileOptions(labels="java")
    assert ProfileOptions(threads=["a"]).threads == ("a",)      # a list is taken, frozen


def test_a_memory_trace_that_keeps_no_samples_says_so():
    memory = MemoryTrace(HEADER)
    with pytest.raises(ValueError, match="keeps no samples"):
        render(memory, ProfileOptions(), None)
