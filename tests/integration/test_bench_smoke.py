"""The issue-5 benchmarks in their quick mode: every configuration runs and produces its numbers and,
where a profiler runs, a profile. Speed is not judged here (benchmarks/RESULTS.md holds the
measured runs); only that each configuration is what it says and works."""
from __future__ import annotations

import json

import pytest

from conftest import run_bench_quick, run_symbolize

pytestmark = pytest.mark.once  # the Rails app runs on Debian's Ruby only (Debian's Rails and puma)

RAILS_CONFIGS = ["none", "gem", "sdb 1 kHz", "sdb 10 kHz", "stackprof wall 1 ms", "stackprof cpu 1 ms"]
MICRO_CONFIGS = ["none", "gem", "sdb 1 kHz", "sdb 10 kHz", "sdb 100 kHz", "stackprof wall 1 ms",
                 "stackprof cpu 1 ms"]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    r = run_bench_quick(out, "rails_overhead", "cpu_micro", timeout=600, extra=("--profiles", str(out / "profiles")))
    return r, out


def rows(out, name):
    with open(out / f"{name}-quick.json") as f:
        doc = json.load(f)
    assert doc["quick"] is True
    return {row["config"]: row for row in doc["rows"]}


def test_rails_overhead_runs_every_configuration_under_load(quick_run):
    # GIVEN the quick run (the harness itself checks that "none" has no sdb gem and no stackprof loaded,
    # the sdb configurations a working registry, and that wrk saw no failed request)
    r, out = quick_run
    got = rows(out, "rails_overhead")
    # THEN every configuration served requests and has its latencies and ratios
    assert list(got) == RAILS_CONFIGS
    for name, row in got.items():
        assert row["rps"]["median"] > 0 and row["p99_ms"]["median"] > 0, name
        assert row["rounds"][0]["requests"] > 10, name
        assert row["rps_ratio"]["median"] > 0, name
    # AND the profilers produced profiles with samples; the sidecar's CPU was measured
    for name in ("sdb 1 kHz", "sdb 10 kHz", "stackprof wall 1 ms", "stackprof cpu 1 ms"):
        assert got[name]["samples"]["median"] > 0, name
        assert (out / "profiles" / "rails_overhead").exists()
    for name in ("sdb 1 kHz", "sdb 10 kHz"):
        assert got[name]["sidecar_cpu_pct"]["median"] > 0, name
        assert got[name]["threads"]["median"] >= 5, name  # at least puma's 5 worker threads
    assert "| sdb 1 kHz |" in r.stdout  # the Markdown table


def test_rails_overhead_sdb_profile_names_the_apps_code(quick_run):
    # GIVEN the trace the sidecar recorded from the loaded Rails app at 1 kHz
    _, out = quick_run
    trace = out / "profiles" / "rails_overhead" / "sdb-1-kHz.msgpack"
    collapsed = out / "sdb-1-kHz.collapsed"
    # WHEN it is symbolized
    s = run_symbolize(str(trace), "--format", "collapsed", "-o", str(collapsed))
    assert s.returncode == 0, s.stderr
    text = collapsed.read_text()
    # THEN the app's code where the requests spend their time is in its stacks, named: the report's
    # template, the JSON API's and the order-writing controllers (each thousands of samples on a loaded
    # machine). Not the report's controller action: it builds an array in ~0.1 ms a request, and a 6 s
    # run under make test and two `yes` caught none of it (12 samples under three `yes` alone).
    for where in ("views/reports/show.html.erb", "controllers/api_controller.rb", "controllers/orders_controller.rb"):
        assert where in text, where


def test_cpu_micro_runs_every_configuration(quick_run):
    _, out = quick_run
    with open(out / "cpu_micro-quick.json") as f:
        doc = json.load(f)
    loop = {row["config"]: row for row in doc["rows"] if row["workload"] == "loop"}
    threads = [row for row in doc["rows"] if row["workload"] == "threads"]
    # THEN the loop ran under every configuration, and every profiler sampled it
    assert list(loop) == MICRO_CONFIGS
    for name, row in loop.items():
        assert row["seconds"]["median"] > 0, name
        if name.startswith(("sdb", "stackprof")):
            assert row["rounds"][0]["samples"] > 0, name
    # AND Thread.new was timed with and without the gem
    assert [t["config"] for t in threads] == ["none", "gem"]
    assert all(t["us_per_thread"]["median"] > 0 for t in threads)


def test_fork_cost_runs_every_configuration_and_leaves_no_registry(tmp_path):
    # GIVEN the fork benchmark in its quick form (200 x fork { exit!(0) } + wait per configuration,
    # plainly and with malloc's fastbins consolidated before each fork)
    run_bench_quick(tmp_path, "fork_cost", timeout=600)
    with open(tmp_path / "fork_cost-quick.json") as f:
        doc = json.load(f)
    # THEN every configuration of both loops forked, the attached sidecar sampled, and the children's
    # registries (children ended by exit!, which runs no at_exit) and the parents' spares were all
    # removed by their parent
    assert [(row["workload"], row["config"]) for row in doc["rows"]] == [
        (w, c) for w in ("fork", "fork_consolidated") for c in ("none", "gem", "sdb 1 kHz")]
    assert all(row["us_per_fork"]["median"] > 0 for row in doc["rows"])
    assert all(row["rounds"][0]["samples"] > 0 for row in doc["rows"] if row["config"] == "sdb 1 kHz")
    assert doc["registries_left"] == 0
