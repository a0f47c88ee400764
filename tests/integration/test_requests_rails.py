"""Per-request attribution on the bundled Rails app (benchmarks/rails_app: Debian's Rails 6.1 and puma,
5 threads) under wrk's mix of its five endpoints: sdb's request spans against the app's own request
log (APP_REQUEST_LOG: every request's action, request id and duration as the app measured it)."""
from __future__ import annotations

import json
import math
import re
import subprocess
from collections import defaultdict

import pytest

from app_servers import RAILS_APP as APP, debian_gems_env, free_port, recording, start_rails_app, stop
from conftest import run_symbolize
from sdb_trace import load_tables

# Debian's Rails and puma load in Debian's Ruby only
pytestmark = pytest.mark.once

MIX = ["ReportsController#show", "ProductsController#index", "ApiController#products", "OrdersController#create",
       "IoController#show"]


def p99(values):
    v = sorted(values)
    return v[max(0, math.ceil(0.99 * len(v)) - 1)]


# GVL waits of each of these endpoints that the blame pins on a request another thread ran in the same
# tick: the evidence the blame test asks for before it judges who held the GVL. Measured, 6 s of wrk:
# 216 and 119 on a quiet machine, 460 and 279 beside two `yes`, a handful beside two make test runs
# and two `yes`; the report views held the GVL in ~20 % of them. Waits come in runs (one wait of one
# request spans many ticks, all blamed on whoever ran then), so the samples alone are not the evidence:
# many requests of each endpoint must have run as well (a loaded machine once ran 5 report views in
# 6 s, and /io's 249 waits fell in none of them)
WAITERS = ("IoController#show", "OrdersController#create")
BLAMED_ENOUGH = 100
REQUESTS_ENOUGH = 30                # of each endpoint, in the recording
WRK_ROUNDS_S = (6, 12, 24, 48)      # wrk runs until that evidence is in: 6 s on a quiet machine


def gvl_blame(text: str) -> dict:
    """The endpoints report's GVL blame: waiter -> (its samples waiting for the GVL, {holder: percent})."""
    blame = text.split("who held the GVL while each endpoint waited for it", 1)[1]
    sections = {}
    for line in blame.split("\n")[1:]:
        if line and not line.startswith(" ") and ": " in line and "samples waiting for the GVL" in line:
            current = line.split(": ", 1)[0]
            sections[current] = (int(line.split(": ", 1)[1].split()[0].replace(",", "")), {})
        elif line.startswith("  ") and sections:
            holder, pct = re.match(r"^  (.+?)\s+(\d+\.\d)%", line).groups()
            sections[current][1][holder.strip()] = float(pct)
    return sections


def blamed_on_requests(text: str, waiter: str) -> float:
    """How many of waiter's GVL waits the blame pins on a request of the app's (none but the MIX's)."""
    if "who held the GVL while each endpoint waited for it" not in text:
        return 0.0
    waited, holders = gvl_blame(text).get(waiter, (0, {}))
    return waited * sum(pct for holder, pct in holders.items() if holder in MIX) / 100


@pytest.fixture(scope="module")
def rails_run(tmp_path_factory):
    """The app under wrk for 6 s, recorded by `attach` from before wrk started to after it ended; again
    for 12 s, 24 s, 48 s (WRK_ROUNDS_S) until the GVL blame has its evidence (BLAMED_ENOUGH waits of each
    waiter pinned on a request, REQUESTS_ENOUGH requests of each endpoint: a loaded machine runs fewer
    requests). The last recording is the one the tests read."""
    tmp = tmp_path_factory.mktemp("rails")
    port = free_port()
    app_log = tmp / "requests.log"
    env = debian_gems_env({"APP_PROFILER": "sdb", "APP_DB": str(tmp / "app.sqlite3"), "PORT": str(port),
                           "APP_THREADS": "5", "APP_REQUEST_LOG": str(app_log)})
    server = start_rails_app(tmp, env)
    try:
        # warm up, not recorded: each action's first requests load code (Kernel#require_relative under
        # OrdersController#create), one long GVL wait per thread that ran them, all while the same one or
        # two requests happened to run; the blame's evidence must be many waits of many requests
        warm = subprocess.run(["wrk", "-t1", "-c5", "-d2s", "-s", str(APP / "wrk" / "mix.lua"), f"http://127.0.0.1:{port}"],
                              capture_output=True, text=True, timeout=120)
        assert warm.returncode == 0, warm.stderr
        for seconds in WRK_ROUNDS_S:
            trace = tmp / f"t{seconds}.msgpack"
            with recording(server.pid, trace):
                wrk = subprocess.run(["wrk", "-t1", "-c5", f"-d{seconds}s", "-s", str(APP / "wrk" / "mix.lua"),
                                      f"http://127.0.0.1:{port}"], capture_output=True, text=True,
                                     timeout=seconds + 120)
                assert wrk.returncode == 0, wrk.stderr
            report = run_symbolize("-f", "endpoints", str(trace), timeout=300)
            assert report.returncode == 0, report.stderr
            ran = defaultdict(int)
            for sp in load_tables(str(trace)).spans.values():
                if sp["kind"] == 1 and sp["end_ns"] is not None:
                    ran[sp["endpoint"]] += 1
            if all(blamed_on_requests(report.stdout, w) >= BLAMED_ENOUGH for w in WAITERS) \
                    and all(ran[action] >= REQUESTS_ENOUGH for action in MIX):
                break
    finally:
        stop(server)    # SIGTERM: the app writes its request log at exit
    t = load_tables(str(trace))
    start, end = t.header["start_mono_ns"], t.end["at_ns"]
    logged = [json.loads(line) for line in app_log.read_text().splitlines()]
    # the requests the app served inside the recording (its clock is the trace's: CLOCK_MONOTONIC)
    window = [r for r in logged if r["at"] * 1e9 >= start and r["at"] * 1e9 + r["ms"] * 1e6 <= end]
    return t, window, report.stdout, logged


def test_every_request_the_app_served_is_a_span_of_its_action_and_no_other(rails_run):
    t, window, text, _ = rails_run
    assert t.end["spans_lost"] == 0
    # (requests wrk left in flight may end after the recording: outside it on both sides)
    requests = [sp for sp in t.spans.values() if sp["kind"] == 1 and sp["end_ns"] is not None
                and sp["end_ns"] <= t.end["at_ns"]]
    served = {r["request_id"]: r for r in window}
    logged = {r["request_id"] for r in rails_run[3]}
    # every request span is one the app served, and every request the app served in the recording is a
    # span, but for those wrk left in flight at its end (at most one per connection: 5) whose span
    # ended just after the recording while the app's own clock read came just before
    assert all(sp["request_id"] in logged for sp in requests)
    missing = set(served) - {sp["request_id"] for sp in requests}
    assert len(missing) <= 5, sorted(missing)
    counts = defaultdict(int)
    for r in window:
        counts[r["endpoint"]] += 1
    for action in MIX:
        assert counts[action] >= 10, (action, counts[action])
        row = next(line.split() for line in text.splitlines() if line.startswith(action + " "))
        assert abs(int(row[2]) - counts[action]) <= 0.05 * counts[action], (action, row, counts[action])


def test_each_requests_span_holds_the_apps_own_timing_of_it_and_the_typical_one_adds_under_a_millisecond(rails_run):
    """sdb's middleware is first in the stack, the app's log right inside it: each span begins before
    the app's clock read and ends after its second one (one clock, CLOCK_MONOTONIC)."""
    t, window, _, _ = rails_run
    by_id = {sp["request_id"]: sp for sp in t.spans.values() if sp["kind"] == 1 and sp["request_id"]}
    for action in MIX:
        mine, apps = [], []
        for r in window:
            if r["endpoint"] != action:
                continue
            sp = by_id.get(r["request_id"])
            if sp is None or sp["end_ns"] is None:
                continue                    # in flight at the end (see above)
            assert sp["endpoint"] == action and sp["status"] == r["status"]
            assert sp["begin_ns"] <= r["at"] * 1e9 + 1000 and r["at"] * 1e9 + r["ms"] * 1e6 <= sp["end_ns"] + 1000, r
            mine.append((sp["end_ns"] - sp["begin_ns"]) / 1e6)
            apps.append(r["ms"])
        assert p99(mine) >= p99(apps)
        # and they agree: the span's clock reads and the app's are a few microseconds of Ruby apart
        # (measured: 20-50 us). Not compared by p99 (it was, within 10 %): with a few dozen requests
        # the p99 is the slowest one, and one preemption between the reads parts them (a `make test`
        # beside two `yes` and another: 304.6 ms against 253.2); the median is the
        # typical request's
        extra = sorted(m - a for m, a in zip(mine, apps))
        assert extra[len(extra) // 2] <= 1.0, (action, extra[len(extra) // 2], p99(mine), p99(apps))


def test_io_is_mostly_blocked_and_report_mostly_on_cpu(rails_run):
    _, _, text, _ = rails_run
    rows = {}
    for line in text.splitlines()[2:]:
        parts = line.split()
        if len(parts) == 12 and parts[1] == "request" and parts[8].endswith("%"):
            rows[parts[0]] = {"running": float(parts[8].rstrip("%")), "gvl": float(parts[9].rstrip("%")),
                              "blocked": float(parts[10].rstrip("%"))}
    assert rows["IoController#show"]["blocked"] > 50, text
    # on CPU: running, or ready and waiting for the GVL another request holds (5 threads, one GVL)
    report = rows["ReportsController#show"]
    assert report["running"] + report["gvl"] > 50, text


def test_gvl_blame_names_the_report_views_among_who_held_the_gvl_while_io_and_orders_waited(rails_run):
    _, _, text, _ = rails_run
    blame = gvl_blame(text)
    for waiter in WAITERS:
        # (the evidence first: wrk ran until each waiter had BLAMED_ENOUGH waits pinned on a request)
        assert blamed_on_requests(text, waiter) >= BLAMED_ENOUGH, (waiter, blame.get(waiter))
        assert blame[waiter][1].get("ReportsController#show", 0) > 0, (waiter, blame[waiter])
