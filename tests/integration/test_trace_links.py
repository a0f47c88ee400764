"""Trace links and the service name: a request's trace id and span id (here from its W3C `traceparent`
header) travel with its samples into pprof labels (`span_id`, `trace_id`) and OTLP links, in
sdb-symbolize's outputs and in the pushes; a request without a valid header carries none. The
service name the app gives (SDB_SERVICE_NAME, else OTEL_SERVICE_NAME, published by its gem) names
the trace, the pushes and -f otlp; without one, the process title does."""
from __future__ import annotations

import http.client
import json
import signal
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

import otlp_decode
from app_servers import debian_gems_env, free_port, listening, stop
from conftest import (PROGRAMS, REPO, SDB_RUBY, SIDECAR, read_trace, ruby_cmd, ruby_env, samples_so_far, symbolized,
                      wait_for)
from sdb_trace import TraceReader, load_tables

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
from push_receiver import PushReceiver, decode_pprof  # noqa: E402

TRACED = {f"traced-{i}": (f"{i + 1:x}" * 32, f"{i + 10:x}" * 16) for i in range(3)}
# the headers that give no ids: malformed (upper case, another version, a cut trace id), all-zero ids
UNTRACED = {
    "upper": "00-" + "AB" * 16 + "-" + "CD" * 8 + "-01",
    "version01": "01-" + "ab" * 16 + "-" + "cd" * 8 + "-01",
    "cut": "00-" + "ab" * 15 + "-" + "cd" * 8 + "-01",
    "zerotrace": "00-" + "0" * 32 + "-" + "cd" * 8 + "-01",
    "zeroparent": "00-" + "ab" * 16 + "-" + "0" * 16 + "-01",
    "none": None,
}
REQUESTS = [(name, f"00-{t}-{sp}-01") for name, (t, sp) in TRACED.items()] + list(UNTRACED.items())


APP_ENV = {"SDB_SERVICE_NAME": "checkout-svc", "OTEL_SERVICE_NAME": "not-this-one"}
PUSHES = ("--push-interval", "2")


def run_under_puma(tmp: Path, receiver: PushReceiver) -> Path:
    """traced_rack_app.ru under Debian's puma (Debian's Ruby only), attached with -o and both pushes;
    each endpoint requested twice, in turn, over HTTP."""
    port, trace = free_port(), tmp / "t.msgpack"
    with open(tmp / "puma.err", "w") as err:
        puma = subprocess.Popen([SDB_RUBY, "-rsdb", "/usr/bin/puma", "-b", f"tcp://127.0.0.1:{port}", "-t", "2:2",
                                 str(PROGRAMS / "traced_rack_app.ru")], stdout=subprocess.DEVNULL, stderr=err,
                                env=debian_gems_env(APP_ENV), cwd=str(tmp))
    sidecar = None
    try:
        wait_for(lambda: listening(port), 30, what="puma listening")
        sidecar = subprocess.Popen([*SIDECAR, "attach", "--pid", str(puma.pid), "-o", str(trace), "--quiet",
                                    "--no-ebpf", "--push", f"pyroscope={receiver.url}", "--push",
                                    f"otlp={receiver.url}", *PUSHES],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(REPO))
        wait_for(lambda: trace.exists() and samples_so_far(trace) > 0, 60, what="first samples")
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for _ in range(2):
            for name, header in REQUESTS:
                conn.request("GET", f"/work/{name}", headers={"traceparent": header} if header else {})
                assert conn.getresponse().read() == b"ok\n"
        sidecar.send_signal(signal.SIGINT)
        _, err = sidecar.communicate(timeout=120)
        assert sidecar.returncode == 0, err
        assert "Traceback" not in err
    finally:
        if sidecar is not None and sidecar.poll() is None:
            sidecar.kill()
            sidecar.communicate(timeout=10)
        stop(puma)
    return trace


def run_program(tmp: Path, receiver: PushReceiver) -> Path:
    """traced_requests.rb (the middleware called as a server would, on the Ruby under test),
    recorded whole with -o and both pushes."""
    trace = tmp / "t.msgpack"
    r = subprocess.run([*SIDECAR, "record", "-q", "--no-ebpf", "-o", str(trace), "--push", f"pyroscope={receiver.url}",
                        "--push", f"otlp={receiver.url}", *PUSHES, "--",
                        *ruby_cmd(PROGRAMS / "traced_requests.rb", json.dumps(REQUESTS))],
                       capture_output=True, text=True, timeout=180, cwd=str(REPO), env=ruby_env(extra=APP_ENV))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    return trace


@pytest.fixture(scope="module", params=[pytest.param(run_under_puma, id="puma", marks=pytest.mark.once),
                                        pytest.param(run_program, id="program", marks=pytest.mark.every_ruby)])
def served(request, tmp_path_factory):
    """(the trace, the receiver that got its pushes) of an app served the REQUESTS with
    SDB_SERVICE_NAME set (and an OTEL_SERVICE_NAME it must not take)."""
    receiver = PushReceiver()
    try:
        trace = request.param(tmp_path_factory.mktemp("trace-links"), receiver)
    finally:
        receiver.close()
    return trace, receiver


def expected(endpoint):
    """(trace id, span id) a sample of this endpoint must carry, None for none."""
    return TRACED.get(endpoint)


def check_pprof_samples(p, with_trace_id: bool = True) -> set:
    """Every sample of a decoded pprof: a traced request's carries exactly its span id (and trace id),
    any other none. Returns the endpoints seen."""
    seen = set()
    for s in p["samples"]:
        labels = s["labels"]
        endpoint = labels.get("endpoint")
        seen.add(endpoint)
        ids = expected(endpoint)
        if ids is None:
            assert "span_id" not in labels and "trace_id" not in labels, labels
            continue
        assert labels["span_id"] == ids[1], labels
        if with_trace_id:
            assert labels["trace_id"] == ids[0], labels
        else:
            assert "trace_id" not in labels, labels
    return seen


def check_otlp_samples(req) -> set:
    otlp_decode.check_dictionary(req)
    seen = set()
    for s in otlp_decode.samples(req):
        endpoint = s.attributes.get("sdb.endpoint")
        seen.add(endpoint)
        assert s.link == expected(endpoint), (endpoint, s.link)
    return seen


def test_the_trace_keeps_each_requests_trace_context_and_the_apps_service_name(served):
    trace, _ = served
    t = load_tables(str(trace))
    assert t.header["service"] == "checkout-svc"
    by_endpoint = defaultdict(set)
    for sp in t.spans.values():
        by_endpoint[sp["endpoint"]].add((sp["trace_id"], sp["span_id"]))
    for name, ids in TRACED.items():
        assert by_endpoint[name] == {ids}
    for name in UNTRACED:
        assert by_endpoint[name] == {(None, None)}
    with TraceReader(str(trace)) as r:
        services = [rec.get("service") for rec in r.records() if rec["t"] == "process"]
    assert services and set(services) == {"checkout-svc"}


def test_pprof_samples_of_traced_requests_carry_exactly_their_span_and_trace_ids(served):
    trace, _ = served
    p = decode_pprof(symbolized(trace, "pprof"))        # pprof-format and go tool pprof -raw agree
    seen = check_pprof_samples(p)
    assert set(TRACED) | set(UNTRACED) <= seen, seen


def test_otlp_samples_of_traced_requests_link_to_their_trace_and_span(served):
    trace, _ = served
    req = otlp_decode.decode(symbolized(trace, "otlp"))
    seen = check_otlp_samples(req)
    assert set(TRACED) | set(UNTRACED) <= seen, seen
    assert {otlp_decode.resource_attributes(rp)["service.name"] for rp in req.resource_profiles} == {"checkout-svc"}
    links = {(ln.trace_id.hex(), ln.span_id.hex()) for ln in list(req.dictionary.link_table)[1:]}
    assert links == set(TRACED.values())


def test_pushed_profiles_carry_the_links_and_the_service_name(served):
    _, receiver = served
    pyroscope_seen, otlp_seen = set(), set()
    for rec in receiver.received:
        if rec.endpoint == "otlp":
            otlp_seen |= check_otlp_samples(rec.otlp)
            assert {otlp_decode.resource_attributes(rp)["service.name"]
                    for rp in rec.otlp.resource_profiles} == {"checkout-svc"}
            continue
        for labels, raw in rec.profiles():
            assert labels["service_name"] == "checkout-svc"
            # Pyroscope keeps span_id per sample; a trace_id label would make a series per request
            pyroscope_seen |= check_pprof_samples(decode_pprof(raw), with_trace_id=False)
    assert set(TRACED) | set(UNTRACED) <= pyroscope_seen, pyroscope_seen
    assert set(TRACED) | set(UNTRACED) <= otlp_seen, otlp_seen


@pytest.mark.every_ruby
@pytest.mark.parametrize("env,header_service,pushed", [
    ({"OTEL_SERVICE_NAME": "otel-named"}, "otel-named", "otel-named"),
    ({}, None, "short_work"),
], ids=["otel_service_name", "process_title"])
def test_the_service_name_is_otel_service_name_else_the_process_title(tmp_path, env, header_service, pushed):
    receiver = PushReceiver()
    trace = tmp_path / "t.msgpack"
    try:
        r = subprocess.run([*SIDECAR, "record", "-q", "--no-ebpf", "-o", str(trace), "--push",
                            f"otlp={receiver.url}", "--", *ruby_cmd(PROGRAMS / "short_work.rb")],
                           capture_output=True, text=True, timeout=120, cwd=str(REPO), env=ruby_env(extra=env))
    finally:
        receiver.close()
    assert r.returncode == 0, r.stderr
    t = read_trace(trace)
    assert t.header.get("service") == header_service
    names = {otlp_decode.resource_attributes(rp)["service.name"]
             for rec in receiver.received for rp in rec.otlp.resource_profiles}
    assert names == {pushed}
    local = otlp_decode.decode(symbolized(trace, "otlp"))
    (name,) = {otlp_decode.resource_attributes(rp)["service.name"] for rp in local.resource_profiles}
    if header_service:
        assert name == header_service
    else:       # the process title, shortened past 80 characters
        title = " ".join(t.header["command"])
        assert name == title or name.endswith("...") and title.startswith(name[:-3]), (name, title)
