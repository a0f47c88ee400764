"""The bundled Rails app in puma's cluster mode (benchmarks/rails_app, APP_WORKERS=2, preload_app!: the
gem loaded in the master, each worker forked from it) under wrk's mix: `attach --pid MASTER` records the
master and both workers, a worker killed during the recording ends as itself and the one puma forks in
its place is a new process; every request thread has its samples from its start (or the recording's),
and the summary has each process's own table. The same with `record -- puma ...`, which sees the
workers born."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from typing import Dict, List

import pytest

from app_servers import RAILS_APP as APP, debian_gems_env, free_port, rails_up, stop
from conftest import REPO, SDB_RUBY, SIDECAR, process_root, run_symbolize, wait_for
from sdb_trace import iter_samples, load_tables
from test_process_tree import processes_so_far

pytestmark = pytest.mark.once       # Debian's Rails and puma load in Debian's Ruby only

RATE = 1000
SHARE = 0.9                 # of the samples a request thread's time in the recording asked for, at least
WORKER_SAMPLES = 20_000     # each worker recorded this long (~1.5 s of its 13 threads) before the checks
PUMA = [SDB_RUBY, "-S", "puma", "-C", str(APP / "config" / "puma.rb")]


def env_for(tmp, port: int, profiler: str = "sdb") -> Dict[str, str]:
    return debian_gems_env({"APP_PROFILER": profiler, "APP_DB": str(tmp / "app.sqlite3"), "PORT": str(port),
                            "APP_THREADS": "5", "APP_WORKERS": "2"})


def workers_of(master: int) -> List[int]:
    from sdb_sidecar.target.tree import children_of
    return [p for p in children_of(master) if "cluster worker" in open(f"/proc/{p}/cmdline").read()]


def wrk(port: int, seconds: int) -> subprocess.Popen:
    """The app's request mix. `Connection: close` (on its GETs) makes wrk connect again and again, so
    that every worker accepts some: a kept-alive connection stays with the worker that took it, and
    on a busy machine one worker can take all eight."""
    return subprocess.Popen(["wrk", "-t1", "-c8", f"-d{seconds}s", "-H", "Connection: close", "-s",
                             str(APP / "wrk" / "mix.lua"), f"http://127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def wait_worker_recorded(trace, pid: int, what: str) -> None:
    """The worker has WORKER_SAMPLES samples in the trace so far and served a request."""
    def done():
        p = processes_so_far(trace).get(pid, {})
        return p.get("samples", 0) >= WORKER_SAMPLES and p.get("requests", 0) > 0
    wait_for(done, 180, interval=0.5, what=f"{what} {pid} recorded, a request served")


def check_request_threads(t, path) -> Dict[int, int]:
    """Every worker's request threads (`puma srv tp NNN`) have >= SHARE of the samples their time in
    the recording asked for; returns pid -> its requests (spans) in the trace."""
    start = t.header["start_mono_ns"]
    requests = {}
    for pt in t.procs.values():
        if pt.proc == 0:
            continue
        end = (pt.process_end or {}).get("at_ns") or t.end["at_ns"]
        begin = max(pt.process["at_ns"], start)
        per_thread: Dict[int, int] = {}

        def count(base, dts, threads, *rest):
            for th in threads:
                per_thread[th] = per_thread.get(th, 0) + 1
        iter_samples(str(path), count, proc=pt.proc)
        pool = {s: th for s, th in pt.threads.items() if re.fullmatch(r"puma srv tp \d{3}", th["name"])}
        assert len(pool) == 5, (pt.pid, [th["name"] for th in pt.threads.values()])
        for s, th in pool.items():
            asked = (min(th.get("end_ns") or end, end) - max(th["start_ns"], begin)) / 1e9 * RATE
            assert per_thread.get(s, 0) >= SHARE * asked, (pt.pid, th["name"], per_thread.get(s, 0), asked)
        requests[pt.pid] = sum(1 for sp in pt.spans.values() if sp["kind"] == 1 and sp["end_ns"] is not None)
    return requests


def summary_sections(trace) -> Dict[str, str]:
    r = run_symbolize("-f", "summary", "--no-lines", str(trace))
    assert r.returncode == 0, r.stderr
    parts = re.split(r"^(process \d+ \(.*?\)): .*$", r.stdout, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def test_attach_to_the_master_records_every_worker_and_the_one_forked_after_a_kill(tmp_path):
    # GIVEN the app in cluster mode (2 workers), under wrk
    port = free_port()
    with open(tmp_path / "puma.log", "w") as log:
        server = subprocess.Popen(PUMA, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  env=env_for(tmp_path, port), cwd=str(APP))
    load = None
    sidecar = None
    try:
        wait_for(lambda: rails_up(port, server) and len(workers_of(server.pid)) == 2, 180, what="the app and 2 workers")
        assert server.poll() is None, (tmp_path / "puma.log").read_text()[-2000:]
        first = workers_of(server.pid)
        load = wrk(port, 600)
        # WHEN sdb attaches to the master alone
        trace = tmp_path / "cluster.msgpack"
        sidecar = subprocess.Popen([*SIDECAR, "attach", "--pid", str(server.pid), "-o", str(trace), "-r", str(RATE),
                                    "-q"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(REPO))
        for pid in first:
            wait_worker_recorded(trace, pid, "worker")
        # AND a worker is killed: puma forks another in its place
        killed_ns = time.monotonic_ns()         # the trace's clock
        os.kill(first[1], signal.SIGKILL)
        wait_for(lambda: [p for p in workers_of(server.pid) if p not in first], 120, interval=0.2,
                 what="puma's new worker")
        new = [p for p in workers_of(server.pid) if p not in first][0]
        wait_worker_recorded(trace, new, "the new worker")
        sidecar.send_signal(signal.SIGINT)
        _, err = sidecar.communicate(timeout=120)
        assert sidecar.returncode == 0, err
    finally:
        if load is not None:
            load.kill()
            load.wait()
        if sidecar is not None and sidecar.poll() is None:
            sidecar.kill()
        stop(server)
    # THEN the trace holds the master, both workers and the new one, each a process with its title
    t = load_tables(str(trace))
    assert t.error is None and t.end is not None, t.error
    procs = {pt.pid: pt for pt in t.procs.values()}
    assert set(procs) == {server.pid, *first, new}, (sorted(procs), server.pid, first, new)
    for pid in (*first, new):
        assert procs[pid].process["parent"] == 0
        assert re.fullmatch(rf"puma: cluster worker [01]: {server.pid} \[rails_app\]", " ".join(procs[pid].command))
    assert procs[first[1]].process_end["reason"] == "target-exited"
    # (the new worker was born after the kill: found after it, however late the old one's end was seen)
    assert procs[new].process["at_ns"] > killed_ns, (procs[new].process, killed_ns)
    # AND every request thread of every worker has its samples, and every worker served requests
    requests = check_request_threads(t, trace)
    assert all(n > 0 for n in requests.values()), requests
    # AND the summary has a table per process: the workers' show the app's controllers, the master's none
    sections = summary_sections(trace)
    titles = {pid: process_root(pid, procs[pid].command) for pid in procs}
    assert set(sections) == set(titles.values()), sorted(sections)
    for pid in (*first, new):
        assert "Controller#" in sections[titles[pid]], titles[pid]
    assert "Controller#" not in sections[titles[server.pid]]


def test_record_sees_the_workers_born_and_records_them_from_their_first_moments(tmp_path):
    # GIVEN `record -- puma` (the gem loaded by record, the app's own require skipped: APP_PROFILER=none)
    port = free_port()
    trace = tmp_path / "record.msgpack"
    with open(tmp_path / "record.log", "w") as log:
        rec = subprocess.Popen([*SIDECAR, "record", "-o", str(trace), "-r", str(RATE), "--", *PUMA], stdout=log,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env_for(tmp_path, port, "none"),
                               cwd=str(APP))
    load = None
    try:
        wait_for(lambda: rails_up(port, rec) and len(processes_so_far(trace)) == 3, 180, interval=0.5,
                 what="the app up and its 3 processes recorded")
        load = wrk(port, 600)
        for pid in list(processes_so_far(trace))[1:]:
            wait_worker_recorded(trace, pid, "worker")
        load.kill()
        load.wait()
        load = None
        rec.send_signal(signal.SIGTERM)         # forwarded to puma, which stops; so does the recording
        assert rec.wait(timeout=120) in (0, 143), (tmp_path / "record.log").read_text()[-2000:]
    finally:
        if load is not None:
            load.kill()
            load.wait()
        stop(rec)
    # THEN the master and its two workers, born in the recording, each recorded from its first moments
    t = load_tables(str(trace))
    assert t.error is None and t.end is not None, t.error
    assert len(t.procs) == 3 and t.end["processes"] == 3
    assert all(pt.process["parent"] == 0 for pt in t.procs.values() if pt.proc)
    requests = check_request_threads(t, trace)
    assert len(requests) == 2 and all(n > 0 for n in requests.values()), requests
