"""A trace of a process tree: each process with its own ids (thread serials, frames, stacks, spans,
addresses: a fork child has its parent's addresses, a worker's thread 1 is not the master's), in one
file. The reader keeps them apart; the outputs put each process above its threads by default, merge
them on request (--merge-processes) or keep one (--pid). On a trace written by hand, so every
expected value is known."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest

from conftest import symbolized
from sdb_trace import KIND_RUBY, STATE_BLOCKED, TraceWriter, iter_samples, load_tables

pytestmark = pytest.mark.once

START = 1_000_000_000
MS = 1_000_000
HEADER = {"pid": 100, "ruby": "3.4.5", "ruby_description": "ruby 3.4.5", "layout": "3.4", "rate_hz": 1000,
          "start_mono_ns": START, "start_wall_ns": 1_700_000_000_000_000_000, "hostname": "h", "sdb_version": "0.1.0",
          "command": ["puma", "master"], "max_depth": 2048}
MASTER = "process 100 (puma master)"
WORKER = "process 101 (puma: cluster worker 0)"


def write_tree(path, master_state=1):
    """The master (process 0): its main thread in `wait_workers`, 10 samples. A worker (process 1,
    forked: the same ISeq address names another method there, as after a reload): its thread 1 in
    `serve` 30 samples, 20 of them in a request; its thread 2 in `serve` 5 samples, idle."""
    with open(path, "wb") as f:
        w = TraceWriter(f, HEADER)
        w.process(0, pid=100, ppid=1, parent=-1, command=["puma", "master"], at_ns=START)
        master = w.for_process(0)
        worker = w.for_process(1)
        master.thread(1, 100, "", START, 1, START)
        master.iseq(0x1000, "wait_workers", "wait_workers", "/app/puma.rb", None, 5, 1, START)
        master.frames(0, [KIND_RUBY], [0x1000], [0x1010], [0], [7])
        master.stacks(0, [[0]])
        w.process(1, pid=101, ppid=100, parent=0, command=["puma: cluster worker 0"], at_ns=START + 2 * MS)
        worker.thread(1, 101, "", START, 1, START)
        worker.thread(2, 102, "puma srv 0", START, 0, START)
        worker.iseq(0x1000, "serve", "serve", "/app/server.rb", None, 10, 1, START)
        worker.frames(0, [KIND_RUBY], [0x1000], [0x1020], [0], [12])
        worker.stacks(0, [[0]])
        worker.spans([1, 2], [1, 1], [0, 0], [1, 1], [START + 5 * MS, START + 25 * MS], [1, 0],
                     [None, "ProductsController#index"], [0, 200], [None, "req-1"])
        master.samples(START, [i * MS for i in range(10)], [1] * 10, [0] * 10, [master_state] * 10)
        worker.samples(START, [i * MS for i in range(30)], [1] * 30, [0] * 30, [1] * 30,
                       span=[1 if 5 <= i < 25 else 0 for i in range(30)], tick=list(range(1, 31)))
        worker.samples(START, [i * MS for i in range(5)], [2] * 5, [0] * 5, [1] * 5)
        w.process_end(1, at_ns=START + 40 * MS, reason="exited", samples=35)
        w.end(at_ns=START + 50 * MS, reason="duration", ticks=50, late=0, missed=0, samples=45, torn=0,
              retried=0, errors=0, threads=3, symbol_errors=0)


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("tree") / "tree.msgpack"
    write_tree(path)
    return path


def collapsed(trace, *args) -> dict:
    out = {}
    for line in symbolized(trace, "collapsed", *args).decode().splitlines():
        stack, n = line.rsplit(" ", 1)
        out[stack] = int(n)
    return out


def test_reader_keeps_each_process_with_its_own_ids(trace):
    t = load_tables(str(trace))
    assert sorted(t.procs) == [0, 1] and t.sample_count == 45
    master, worker = t.procs[0], t.procs[1]
    assert master is t and master.pid == 100 and worker.pid == 101
    assert worker.process["parent"] == 0 and worker.process_end["reason"] == "exited"
    assert master.process_samples == 10 and worker.process_samples == 35
    # the same address and serial mean different things in each process
    assert master.iseqs[0x1000][0].label == "wait_workers" and worker.iseqs[0x1000][0].label == "serve"
    assert set(master.threads) == {1} and set(worker.threads) == {1, 2}
    assert set(worker.spans) == {1} and not master.spans


def test_iter_samples_gives_one_process_unless_asked_for_all(trace):
    seen = []
    iter_samples(str(trace), lambda base, dts, threads, stacks, states: seen.append(len(dts)))
    assert seen == [10], "a reader that knows nothing of processes must see process 0's ids only"
    seen = []
    iter_samples(str(trace), lambda proc, base, dts, *rest: seen.append((proc, len(dts))), proc=None)
    assert seen == [(0, 10), (1, 30), (1, 5)]


def test_each_process_is_a_root_above_its_threads(trace):
    assert collapsed(trace) == {
        f"{MASTER};thread main (tid 100);wait_workers (/app/puma.rb:7)": 10,
        f"{WORKER};thread main (tid 101);serve (/app/server.rb:12)": 30,
        f"{WORKER};thread puma srv 0 (tid 102);serve (/app/server.rb:12)": 5,
    }


def test_merge_processes_puts_every_thread_side_by_side(trace):
    assert collapsed(trace, "--merge-processes") == {
        "thread main (tid 100);wait_workers (/app/puma.rb:7)": 10,
        "thread main (tid 101);serve (/app/server.rb:12)": 30,
        "thread puma srv 0 (tid 102);serve (/app/server.rb:12)": 5,
    }


def test_pid_keeps_one_process(trace):
    assert collapsed(trace, "--pid", "101") == {
        f"{WORKER};thread main (tid 101);serve (/app/server.rb:12)": 30,
        f"{WORKER};thread puma srv 0 (tid 102);serve (/app/server.rb:12)": 5,
    }
    r = subprocess.run([sys.executable, "-m", "sdb_symbolize.cli", str(trace), "--pid", "7"], capture_output=True,
                       timeout=60)
    assert r.returncode == 2 and b"--pid 7: no such process in the trace (processes: 100, 101)" in r.stderr


def test_summary_has_a_table_per_process(trace):
    text = symbolized(trace, "summary").decode()
    assert "45 samples" in text and "3 thread(s); 2 processes" in text
    master_at, worker_at = text.index(f"{MASTER}: 10 samples, 1 thread(s)"), \
        text.index(f"{WORKER}: 35 samples, 2 thread(s), ended (exited)")
    assert master_at < worker_at
    assert "100.00%  wait_workers (/app/puma.rb)" in text[master_at:worker_at]
    assert "100.00%  serve (/app/server.rb)" in text[worker_at:]


def test_summary_names_a_process_whose_samples_were_all_left_out(tmp_path):
    # GIVEN a tree whose master was blocked the whole time (STATE_BLOCKED: left out without --idle)
    path = tmp_path / "blocked-master.msgpack"
    write_tree(path, master_state=STATE_BLOCKED)
    # THEN the summary still has a line for it, saying why it has no table
    text = symbolized(path, "summary").decode()
    assert "35 samples" in text and "2 processes" in text
    master_at, worker_at = text.index(f"{MASTER}: no samples shown (without --idle"), \
        text.index(f"{WORKER}: 35 samples, 2 thread(s), ended (exited)")
    assert master_at < worker_at and "wait_workers" not in text
    # AND with --idle it has its table
    text = symbolized(path, "summary", "--idle").decode()
    assert f"{MASTER}: 10 samples, 1 thread(s)" in text and "wait_workers (/app/puma.rb)" in text


def test_a_workers_requests_are_its_own_and_the_endpoints_report_finds_them(trace):
    text = symbolized(trace, "endpoints").decode()
    row = next(line for line in text.splitlines() if line.startswith("ProductsController#index"))
    assert row.split()[2] == "1", row                   # one request
    assert collapsed(trace, "--endpoint", "ProductsController#index") == {
        f"{WORKER};thread main (tid 101);serve (/app/server.rb:12)": 20}
    by = collapsed(trace, "--by", "endpoint")
    assert by[f"{WORKER};thread main (tid 101);[ProductsController#index];serve (/app/server.rb:12)"] == 20


def test_timeline_formats_name_each_threads_process(trace):
    d = json.loads(symbolized(trace, "speedscope", "--sample-type", "wall"))
    assert [p["name"] for p in d["profiles"]] == [f"{MASTER} / thread main (tid 100)",
                                                   f"{WORKER} / thread main (tid 101)",
                                                   f"{WORKER} / thread puma srv 0 (tid 102)"]
    f = json.loads(symbolized(trace, "firefox"))
    assert [(t["pid"], t["processName"], t["tid"]) for t in f["threads"]] == [
        ("100", "puma master", 100), ("101", "puma: cluster worker 0", 101), ("101", "puma: cluster worker 0", 102)]
    assert f["threads"][1]["processShutdownTime"] == 40.0
    lines = [json.loads(x) for x in symbolized(trace, "json").decode().splitlines()]
    assert {(x["tid"], x["pid"]) for x in lines if "t" in x} == {(100, 100), (101, 101), (102, 101)}


def test_pprof_labels_each_sample_with_its_process(trace):
    from sdb_symbolize.pprof import Profile
    p = Profile()
    p.ParseFromString(gzip.decompress(symbolized(trace, "pprof")))
    s = p.string_table
    per_pid = {}
    for sample in p.sample:
        labels = {s[lb.key]: (lb.num if not lb.str else s[lb.str]) for lb in sample.label}
        per_pid[(labels["pid"], labels["process"])] = per_pid.get((labels["pid"], labels["process"]), 0) + \
            sample.value[0]
    assert per_pid == {(100, MASTER): 10, (101, WORKER): 35}
