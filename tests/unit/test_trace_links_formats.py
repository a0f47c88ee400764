"""A span's trace context in the formats, on a trace written by hand: the samples of a traced request
(a label nested in it too: its unit is the request) carry its ids as pprof labels and as an OTLP link,
the others none; a trace whose ids are not hex of their length is corrupt (exit 23), and a trace
without the columns (an older sidecar's) reads as having no trace context."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import otlp_decode
from conftest import SYMBOLIZE, symbolized
from sdb_trace import KIND_RUBY, TraceWriter, load_tables

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from push_receiver import decode_pprof  # noqa: E402

pytestmark = pytest.mark.once

START = 1_000_000_000
MS = 1_000_000
HEADER = {"pid": 77, "ruby": "3.4.5", "ruby_description": "ruby 3.4.5", "layout": "3.4", "rate_hz": 1000,
          "start_mono_ns": START, "start_wall_ns": 1_700_000_000_000_000_000, "hostname": "h", "sdb_version": "0.1.0",
          "command": ["puma"], "max_depth": 2048, "service": "shop"}
TRACE_ID, SPAN_ID = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
# (what, span, parent, thread, at ms, kind, endpoint, status, request id, trace id, span id)
EVENTS = [
    (1, 1, 0, 1, 0, 1, "Traced#show", 0, None, TRACE_ID, SPAN_ID),
    (1, 2, 1, 1, 2, 3, "inner", 0, None, None, None),
    (2, 2, 1, 1, 4, 0, "inner", 0, None, None, None),
    (2, 1, 0, 1, 5, 0, "Traced#show", 200, "req-a", None, None),
    (1, 3, 0, 1, 5, 1, "Plain#show", 0, None, None, None),
    (2, 3, 0, 1, 10, 0, "Plain#show", 200, "req-b", None, None),
]


def span_at(ms: int) -> int:
    return 1 if ms < 2 else 2 if ms < 4 else 1 if ms < 5 else 3


def write(path: Path, events=EVENTS, columns: bool = True) -> Path:
    with open(path, "wb") as f:
        w = TraceWriter(f, HEADER)
        w.thread(1, 101, "puma srv 0", START, 1, START)
        w.iseq(0x1000, "<main>", "<main>", "/app/app.rb", None, 1, 0, START)
        w.frames(0, [KIND_RUBY], [0x1000], [0x1010], [0], [9])
        w.stacks(0, [[0]])
        cols = [list(c) for c in zip(*events)]
        w.spans(*cols[:4], [START + ms * MS for ms in cols[4]], *cols[5:9], *(cols[9:11] if columns else ()))
        ts = list(range(10))
        w.samples(START, [t * MS for t in ts], [1] * 10, [0] * 10, [1] * 10, span=[span_at(t) for t in ts],
                  tick=list(range(1, 11)))
        w.end(at_ns=START + 10 * MS, reason="duration", ticks=10, late=0, missed=0, samples=10, torn=0,
              retried=0, errors=0, threads=1, symbol_errors=0)
    return path


def test_pprof_labels_the_traced_requests_samples_with_its_ids_and_no_other(tmp_path):
    p = decode_pprof(symbolized(write(tmp_path / "t.msgpack"), "pprof"))
    by_request = {}
    for s in p["samples"]:
        labels = s["labels"]
        by_request.setdefault(labels.get("request_id"), set()).add((labels.get("trace_id"), labels.get("span_id")))
    assert by_request == {"req-a": {(TRACE_ID, SPAN_ID)}, "req-b": {(None, None)}}


def test_otlp_links_the_traced_requests_samples_and_names_the_headers_service(tmp_path):
    req = otlp_decode.decode(symbolized(write(tmp_path / "t.msgpack"), "otlp"))
    otlp_decode.check_dictionary(req)
    links = {}
    for s in otlp_decode.samples(req):
        if s.type == "wall":
            links.setdefault(s.attributes.get("sdb.endpoint"), []).extend([s.link] * len(s.values))
    assert links == {"Traced#show": [(TRACE_ID, SPAN_ID)] * 5, "Plain#show": [None] * 5}
    assert [otlp_decode.resource_attributes(rp)["service.name"] for rp in req.resource_profiles] == ["shop"]


def test_a_trace_without_the_id_columns_has_no_trace_context(tmp_path):
    t = load_tables(str(write(tmp_path / "t.msgpack", columns=False)))
    assert {(sp["trace_id"], sp["span_id"]) for sp in t.spans.values()} == {(None, None)}


@pytest.mark.parametrize("bad", ["0AF7651916CD43DD8448EB211C80319C", TRACE_ID[:-1], 7])
def test_a_trace_id_that_is_not_32_lowercase_hex_digits_is_corrupt(tmp_path, bad):
    events = [EVENTS[0][:9] + (bad, SPAN_ID)] + EVENTS[1:]
    r = subprocess.run([*SYMBOLIZE, str(write(tmp_path / "t.msgpack", events)), "-f", "pprof", "-o",
                        str(tmp_path / "out.pb.gz")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 23, r.stderr
    assert "trace_id is not a column of 32-digit hex ids" in r.stderr
