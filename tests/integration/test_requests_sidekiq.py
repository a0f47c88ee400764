"""Jobs attributed to their class: a real Sidekiq (Debian's 6.4) server with a real Redis, two job
classes (one CPU-bound, one sleeping), recorded by `attach`: every job the app ran is a span named
after its class with its jid, and each class has its own profile."""
from __future__ import annotations

import os
import subprocess
from collections import Counter

import pytest

from app_servers import debian_gems_env, free_port, listening, recording, stop
from conftest import PROGRAMS, SDB_RUBY, run_symbolize, wait_for
from sdb_trace import load_tables

# Debian's Sidekiq loads in Debian's Ruby only
pytestmark = pytest.mark.once
JOBS = 30


@pytest.fixture(scope="module")
def sidekiq_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sidekiq")
    port, log, trace = free_port(), tmp / "jobs.log", tmp / "t.msgpack"
    redis = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                              "--appendonly", "no", "--dir", str(tmp)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    env = debian_gems_env({"REDIS_URL": f"redis://127.0.0.1:{port}/0", "SDB_TEST_LOG": str(log)})
    server = None
    try:
        wait_for(lambda: listening(port), 30, what="redis-server listening")
        with open(tmp / "sidekiq.log", "w") as out:
            server = subprocess.Popen([SDB_RUBY, "-rsdb", "-S", "sidekiq", "-r", str(PROGRAMS / "sidekiq_jobs.rb"),
                                       "-c", "2", "-t", "5"], stdout=out, stderr=subprocess.STDOUT, env=env,
                                      cwd=str(tmp))
        wait_for(lambda: os.path.exists(f"/dev/shm/sdb-{server.pid}") or server.poll() is not None, 60,
                 what="the Sidekiq server's registry")
        assert server.poll() is None, (tmp / "sidekiq.log").read_text()[-2000:]
        with recording(server.pid, trace):
            enqueue = subprocess.run([SDB_RUBY, "-e", f'require "sidekiq"; load {str(PROGRAMS / "sidekiq_jobs.rb")!r}; '
                                      f'{JOBS}.times {{ CrunchNumbersJob.perform_async(20); '
                                      f'WaitForPartnerJob.perform_async(20) }}'],
                                     capture_output=True, text=True, env=env, timeout=60)
            assert enqueue.returncode == 0, enqueue.stderr
            wait_for(lambda: log.exists() and len(log.read_text().splitlines()) >= 2 * JOBS, 120,
                     what="every job done")
    finally:
        if server is not None:
            stop(server)
        stop(redis)
    done = [line.split() for line in log.read_text().splitlines()]
    return load_tables(str(trace)), done, trace


def test_every_job_is_a_span_named_after_its_class_with_its_jid(sidekiq_run):
    t, done, _ = sidekiq_run
    jobs = [sp for sp in t.spans.values() if sp["kind"] == 2 and sp["end_ns"] is not None]
    assert sorted((sp["endpoint"], sp["request_id"]) for sp in jobs) == sorted((k, jid) for k, jid in done)
    assert Counter(sp["endpoint"] for sp in jobs) == {"CrunchNumbersJob": JOBS, "WaitForPartnerJob": JOBS}
    assert all(sp["status"] == 0 for sp in jobs)


def test_each_job_class_has_its_own_profile(sidekiq_run):
    _, _, trace = sidekiq_run
    crunch = run_symbolize("--endpoint", "CrunchNumbersJob", str(trace))
    wait = run_symbolize("--endpoint", "WaitForPartnerJob", str(trace))
    assert crunch.returncode == 0 and wait.returncode == 0, crunch.stderr + wait.stderr
    assert "CrunchNumbersJob#perform" in crunch.stdout and "WaitForPartnerJob#perform" not in crunch.stdout
    assert "WaitForPartnerJob#perform" in wait.stdout and "CrunchNumbersJob#perform" not in wait.stdout
    report = run_symbolize("-f", "endpoints", str(trace))
    rows = {line.split()[0]: line.split() for line in report.stdout.splitlines()
            if line.split()[:2] in (["CrunchNumbersJob", "job"], ["WaitForPartnerJob", "job"])}
    assert int(rows["CrunchNumbersJob"][2]) == JOBS and int(rows["WaitForPartnerJob"][2]) == JOBS
    # where their time went: the CPU-bound class on CPU, the sleeping one blocked
    crunch_on_cpu = float(rows["CrunchNumbersJob"][8].rstrip("%")) + float(rows["CrunchNumbersJob"][9].rstrip("%"))
    assert crunch_on_cpu > 50, report.stdout
    assert float(rows["WaitForPartnerJob"][10].rstrip("%")) > 50, report.stdout
