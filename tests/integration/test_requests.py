"""Per-request attribution: the units of work the app names (Sdb.label, the Rack middleware) reach the
trace as spans, every one the app logged and no other, and each sample carries the unit it was taken
in; `sdb-symbolize --format endpoints` counts them and tells where their time went."""
from __future__ import annotations

import http.client
import json
import subprocess
import threading
from collections import Counter

import pytest

from app_servers import debian_gems_env, free_port, listening, recording, stop
from conftest import PROGRAMS, REPO, SDB_RUBY, SIDECAR, ruby_cmd, ruby_env, run_symbolize, wait_for
from sdb_trace import iter_samples, load_tables


def spans_by_request_id(tables) -> dict:
    return {sp["request_id"]: sp for sp in tables.spans.values() if sp["request_id"]}


def samples_with_span(path) -> list:
    out = []
    iter_samples(str(path), lambda base, dts, ths, sts, states, wins, spans, ticks:
                 out.extend(zip(sts, states, spans)), spans=True)
    return out


@pytest.fixture(scope="module")
def labelled(tmp_path_factory):
    """labelled_units.rb recorded whole by `record`: the trace and the app's own log."""
    tmp = tmp_path_factory.mktemp("labelled")
    trace, log = tmp / "t.msgpack", tmp / "log.json"
    r = subprocess.run([*SIDECAR, "record", "-q", "-o", str(trace), "--", *ruby_cmd(PROGRAMS / "labelled_units.rb",
                                                                                 "2", str(log))],
                       capture_output=True, text=True, timeout=120, cwd=str(REPO), env=ruby_env())
    assert r.returncode == 0, r.stderr
    return trace, json.loads(log.read_text())


def test_every_unit_the_app_logged_is_in_the_trace_with_its_endpoint_and_no_other(labelled):
    trace, log = labelled
    t = load_tables(str(trace))
    assert t.end["spans_lost"] == 0
    spans = spans_by_request_id(t)
    # the same units: every one the app logged, no other
    assert set(spans) == {u["request_id"] for u in log}
    for u in log:
        sp = spans[u["request_id"]]
        assert sp["endpoint"] == u["endpoint"] and sp["kind"] == 3 and sp["parent"] == 0
        # the span's begin and end are taken inside the app's own two clock reads around the block
        assert 0 < (sp["end_ns"] - sp["begin_ns"]) / 1e6 <= u["ms"]


def test_a_sample_carries_the_unit_it_was_taken_in(labelled):
    trace, _ = labelled
    t = load_tables(str(trace))
    by_endpoint = {}
    for sid, state, span in samples_with_span(trace):
        sp = t.spans.get(span)
        if sp is None:
            continue
        by_endpoint.setdefault(sp["endpoint"], Counter())[state] += 1
    # a CPU-bound unit runs; a sleeping one is blocked (thread states: 1 running, 3 blocked)
    cpu, io = by_endpoint["Cpu#work"], by_endpoint["Io#wait"]
    assert sum(cpu.values()) >= 20, cpu
    assert cpu[1] >= 0.9 * sum(cpu.values()), cpu
    assert io[3] >= 0.9 * sum(io.values()), io


def test_endpoints_report_counts_each_endpoint_and_shows_where_its_time_went(labelled):
    trace, log = labelled
    r = run_symbolize("-f", "endpoints", str(trace))
    assert r.returncode == 0, r.stderr
    rows = {line.split()[0]: line.split() for line in r.stdout.splitlines()[2:] if len(line.split()) > 5}
    logged = Counter(u["endpoint"] for u in log)
    for endpoint in ("Cpu#work", "Io#wait"):
        assert rows[endpoint][1] == "label"
        assert int(rows[endpoint][2]) == logged[endpoint]
    # the samples of each endpoint, where its time went: the CPU one's innermost frame is the app's burn
    cpu_block = r.stdout.split("\nCpu#work\n", 1)[1]
    assert cpu_block.splitlines()[0].lstrip().startswith("running") and "Object#burn" in cpu_block.splitlines()[0]
    io_block = r.stdout.split("\nIo#wait\n", 1)[1]
    assert any(line.lstrip().startswith("blocked") and "Kernel#sleep" in line for line in io_block.splitlines()[:4])


def test_endpoint_filter_and_grouping_keep_only_that_endpoints_samples(labelled):
    trace, _ = labelled
    r = run_symbolize("--endpoint", "Io#wait", str(trace))
    assert r.returncode == 0, r.stderr
    # inside the label's block (or Sdb.label itself, around it), mostly the sleep
    lines = [(line, int(line.rsplit(" ", 1)[1])) for line in r.stdout.splitlines()]
    assert lines and all("Sdb.label" in line for line, _ in lines)
    assert sum(n for line, n in lines if "Object#wait_for_io" in line) >= 0.9 * sum(n for _, n in lines)
    r = run_symbolize("--by", "endpoint", str(trace))
    roots = Counter(line.split(";")[1] for line in r.stdout.splitlines())
    assert {"[Cpu#work]", "[Io#wait]"} <= set(roots)
    r = run_symbolize("--endpoint", "Nope#none", str(trace))
    assert r.returncode == 2 and "Cpu#work" in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.once
def test_a_plain_rack_app_under_puma_has_every_request_and_its_labels_samples(tmp_path):
    """Debian's puma and rack (Debian's Ruby): the middleware and Sdb.label in a real server, its
    requests served by four puma threads at once."""
    port, log = free_port(), tmp_path / "app.log"
    env = debian_gems_env({"SDB_TEST_LOG": str(log)})
    with open(tmp_path / "puma.err", "w") as err:
        puma = subprocess.Popen([SDB_RUBY, "-rsdb", "/usr/bin/puma", "-b", f"tcp://127.0.0.1:{port}", "-t", "4:4",
                                 str(PROGRAMS / "rack_app.ru")], stdout=subprocess.DEVNULL, stderr=err, env=env,
                                cwd=str(tmp_path))
    trace = tmp_path / "t.msgpack"
    try:
        wait_for(lambda: listening(port), 30, what="puma listening")
        with recording(puma.pid, trace):
            errors = []

            def client(k: int) -> None:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                for i in range(40):
                    path = ("/cpu", "/io", "/report", "/missing")[(i + k) % 4]
                    try:
                        conn.request("GET", path, headers={"X-Request-Id": f"c{k}-{i}"})
                        conn.getresponse().read()
                    except OSError as e:
                        errors.append(e)
            clients = [threading.Thread(target=client, args=(k,)) for k in range(4)]
            for c in clients:
                c.start()
            for c in clients:
                c.join()
            assert not errors
    finally:
        stop(puma)

    served = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(served) == 160
    t = load_tables(str(trace))
    assert t.end["spans_lost"] == 0
    spans = spans_by_request_id(t)
    requests = {rid: sp for rid, sp in spans.items() if sp["kind"] == 1}
    # every request the app served is a span, with the app's endpoint and status, and no other
    assert set(requests) == {s["request_id"] for s in served}
    for s in served:
        sp = requests[s["request_id"]]
        assert (sp["endpoint"], sp["status"]) == (s["endpoint"], s["status"])
    # each Sdb.label inside a /report request is a span of its own, within its request
    labels = [sp for sp in t.spans.values() if sp["kind"] == 3]
    assert len(labels) == sum(1 for s in served if s["endpoint"] == "GET /report")
    for lab in labels:
        parent = t.spans[lab["parent"]]
        assert lab["endpoint"] == "Report.build" and parent["endpoint"] == "GET /report"
        assert parent["thread"] == lab["thread"]
    # the samples taken inside a label carry it, and show the label's own work
    label_serials = {lab["span"] for lab in labels}
    leafs = Counter()
    for sid, state, span in samples_with_span(trace):
        if span in label_serials and state == 1:
            leafs[sid] += 1
    assert leafs, "no running sample inside an Sdb.label"
    r = run_symbolize("-f", "endpoints", str(trace))
    assert r.returncode == 0, r.stderr
    for endpoint in ("GET /cpu", "GET /io", "GET /report"):
        assert any(line.startswith(endpoint) and line.split()[3] == "40" for line in r.stdout.splitlines()), r.stdout
    # (config.ru's methods are singleton methods of puma's Rack::Builder: Ruby names them so)
    report_block = r.stdout.split("\nGET /report\n", 1)[1].splitlines()
    assert report_block[0].lstrip().startswith("running") and ".burn" in report_block[0]


@pytest.mark.once
def test_pprof_samples_carry_their_endpoint_and_request_id_as_labels(labelled, tmp_path):
    """Read by pprof-format (npm), a decoder sdb did not write: every sample taken inside a label
    has its endpoint and request id as labels, and the CPU label's samples are in the app's burn."""
    from test_format_pprof_decoder import DECODE, PPROF_FORMAT
    trace, log = labelled
    out = tmp_path / "p.pb.gz"
    r = run_symbolize("-f", "pprof", "-o", str(out), str(trace))
    assert r.returncode == 0, r.stderr
    d = subprocess.run(["node", "-e", DECODE, str(PPROF_FORMAT), str(out)], capture_output=True, text=True,
                       timeout=60)
    assert d.returncode == 0, d.stderr
    samples = json.loads(d.stdout)["samples"]
    ids = {u["request_id"]: u["endpoint"] for u in log}
    labelled_samples = [s for s in samples if "endpoint" in s["labels"]]
    assert labelled_samples
    for s in labelled_samples:
        assert ids[s["labels"]["request_id"]] == s["labels"]["endpoint"]
    cpu = [s for s in labelled_samples if s["labels"]["endpoint"] == "Cpu#work"]
    # (the burn loop's innermost frame is itself or the clock it reads)
    in_burn = sum(s["value"][0] for s in cpu if any(f[0] == "Object#burn" for f in s["frames"]))
    assert in_burn >= 0.9 * sum(s["value"][0] for s in cpu)


def test_compare_slow_puts_what_slow_units_do_and_fast_ones_do_not_first(labelled):
    trace, _ = labelled
    # the sleeping units (10 ms, never less) are slow beside the CPU-bound ones (3 ms of CPU: slower
    # only when preempted for 6 ms or more)
    r = run_symbolize("--endpoint", "Cpu#work", "--endpoint", "Io#wait", "--slower-than", "9ms", "--compare-slow",
                      str(trace))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    first = lines[lines.index(next(x for x in lines if "SELF (innermost frame)" in x)) + 1].split()
    assert first[-1] == "Kernel#sleep" and float(first[0].rstrip("%")) > 50 and first[1] == "0.0%", first
    assert run_symbolize("--compare-slow", str(trace)).returncode == 2
