"""A profiles backend on loopback for the --push tests: Pyroscope's Connect Push API
(`POST /push.v1.PusherService/Push`) and `/ingest`, and OTLP's `POST /v1development/profiles`,
implemented from their published specifications. Every payload is decoded by code sdb did not
write: the PushRequest by the protobuf library from a descriptor of push.proto built here, each
pprof by the npm `pprof-format` package (names, labels, values) and by `go tool pprof -raw`
(totals per label set, which must agree), OTLP by the `opentelemetry-proto` package's generated
classes. The real Pyroscope client (pyroscope-io) is decoded by the same code (its test).

Behaviours for the failure tests: `status` (answer every request with it), `retry_after`, `hang`
(accept, read, never answer), `down()`/`up()` (the port refuses connections, then listens again).
The benchmarks (push_cost, agent_cost) take the same server without the decoding: RawReceiver."""
from __future__ import annotations

import gzip
import json
import os
import re
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple
from urllib.parse import parse_qs, urlsplit

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

REPO = Path(__file__).resolve().parents[2]
PPROF_FORMAT = REPO / "build" / "speedscope" / "node_modules" / "pprof-format"
PUSH_PATH = "/push.v1.PusherService/Push"
OTLP_PATH = "/v1development/profiles"

DECODE_JS = r"""
const { Profile } = require(process.argv[1]);
let raw = require("fs").readFileSync(process.argv[2]);
if (raw[0] === 0x1f && raw[1] === 0x8b) raw = require("zlib").gunzipSync(raw);
const p = Profile.decode(raw);
const st = p.stringTable.strings || p.stringTable;
const s = (i) => st[Number(i)];
const fn = new Map(p.function.map((f) => [Number(f.id), f]));
const loc = new Map(p.location.map((l) => [Number(l.id), l]));
console.log(JSON.stringify({
  sampleType: p.sampleType.map((v) => [s(v.type), s(v.unit)]),
  period: Number(p.period), periodType: p.periodType ? [s(p.periodType.type), s(p.periodType.unit)] : null,
  timeNanos: String(p.timeNanos), durationNanos: String(p.durationNanos),
  samples: p.sample.map((x) => ({
    value: x.value.map(Number),
    labels: Object.fromEntries(x.label.map((l) => [s(l.key), Number(l.str) ? s(l.str) : Number(l.num)])),
    frames: x.locationId.map((id) => {
      const l = loc.get(Number(id));
      return l.line.map((line) => s(fn.get(Number(line.functionId)).name));
    }).flat(),
  })),
}));
"""


def _push_classes():
    """push.v1.PushRequest and friends, from a descriptor written here after Pyroscope's
    api/push/v1/push.proto and api/types/v1/types.proto (field numbers as published)."""
    f = descriptor_pb2.FileDescriptorProto(name="sdb_test_push.proto", package="push.v1", syntax="proto3")
    F = descriptor_pb2.FieldDescriptorProto

    def message(name, fields):
        m = f.message_type.add(name=name)
        for fname, number, ftype, label, type_name in fields:
            fd = m.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                fd.type_name = type_name
    rep, opt = F.LABEL_REPEATED, F.LABEL_OPTIONAL
    message("LabelPair", [("name", 1, F.TYPE_STRING, opt, None), ("value", 2, F.TYPE_STRING, opt, None)])
    message("RawSample", [("raw_profile", 1, F.TYPE_BYTES, opt, None), ("ID", 2, F.TYPE_STRING, opt, None)])
    message("RawProfileSeries", [("labels", 1, F.TYPE_MESSAGE, rep, ".push.v1.LabelPair"),
                                 ("samples", 2, F.TYPE_MESSAGE, rep, ".push.v1.RawSample")])
    message("PushRequest", [("series", 1, F.TYPE_MESSAGE, rep, ".push.v1.RawProfileSeries")])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("push.v1.PushRequest"))


PushRequest = _push_classes()


def decode_pprof(raw: bytes) -> dict:
    """A pprof (gzipped or not) decoded by pprof-format; its totals per label set checked against
    go tool pprof's reading of the same bytes (AssertionError if they differ)."""
    if not (PPROF_FORMAT / "package.json").exists():
        raise AssertionError(f"missing {PPROF_FORMAT}: run `make build/stamps/npm`")
    with tempfile.NamedTemporaryFile(suffix=".pb") as tmp:
        tmp.write(raw)
        tmp.flush()
        r = subprocess.run(["node", "-e", DECODE_JS, str(PPROF_FORMAT), tmp.name], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, f"pprof-format cannot decode the profile: {r.stderr}"
        p = json.loads(r.stdout)
        go = go_totals(tmp.name)
    mine: Dict[Tuple, int] = {}
    for s in p["samples"]:
        key = tuple(sorted((k, str(v)) for k, v in s["labels"].items()))
        mine[key] = mine.get(key, 0) + s["value"][0]
    assert mine == go, f"pprof-format and go tool pprof disagree: {mine} != {go}"
    return p


_LABEL_KEY = re.compile(r"(?:^|(?<= ))([A-Za-z_][\w.]*):\[")


def go_totals(path: str) -> Dict[Tuple, int]:
    """go tool pprof -raw: the first value summed per sample label set."""
    r = subprocess.run(["go", "tool", "pprof", "-raw", path], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "HOME": tempfile.gettempdir(), "PPROF_TMPDIR": tempfile.gettempdir()})
    assert r.returncode == 0, f"go tool pprof cannot read the profile: {r.stderr}"
    lines = r.stdout.splitlines()
    start = lines.index("Samples:") + 2
    totals: Dict[Tuple, int] = {}
    value, labels = None, []

    def done():
        if value is not None:
            key = tuple(sorted(labels))
            totals[key] = totals.get(key, 0) + value
    for line in lines[start:]:
        if not line.startswith(" "):
            break
        head = line.split(":")[0].split()
        if line.lstrip()[0].isdigit() and ":" in line and all(w.isdigit() for w in head):
            done()
            value, labels = int(head[0]), []
            continue
        # label lines: key:[value] key:[value] ...; a value may hold brackets (puma's title `... [app]`):
        # it ends at the "]" before the next " key:[" (the names of sdb's tests hold no such text)
        rest = line.strip()
        keys = list(_LABEL_KEY.finditer(rest))
        for k, nxt in zip(keys, keys[1:] + [None]):
            end = (nxt.start() if nxt is not None else len(rest))
            val = rest[k.end():end].rstrip()
            labels.append((k.group(1), val[:-1] if val.endswith("]") else val))
    done()
    return totals


@dataclass
class Received:
    """One request the receiver accepted: its endpoint, query, headers and decoded content."""
    endpoint: str                   # "push", "ingest" or "otlp"
    query: Dict[str, str]
    headers: Dict[str, str]
    series: List[Tuple[Dict[str, str], List[bytes]]] = field(default_factory=list)   # push: labels, raw pprofs
    otlp: object = None             # ExportProfilesServiceRequest
    raw: bytes = b""

    def profiles(self) -> List[Tuple[Dict[str, str], bytes]]:
        """(series labels, pprof bytes) of each profile it carries (push and ingest)."""
        if self.endpoint == "ingest":
            name = self.query.get("name", "")
            return [({"__ingest_name__": name}, self.raw)]
        return [(labels, raw) for labels, raws in self.series for raw in raws]


def answer(h: BaseHTTPRequestHandler, status: int, body: bytes = b"", headers: Tuple[Tuple[str, str], ...] = ()) -> None:
    """One HTTP answer: the status, the headers, the body and its length."""
    h.send_response(status)
    for name, value in headers:
        h.send_header(name, value)
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    if body:
        h.wfile.write(body)


class LoopbackServer:
    """An HTTP server in a thread on 127.0.0.1 (a free port, kept across down()/up()) that gives each
    POST, its body read, to on_post(handler, body), which answers it."""

    def __init__(self, on_post: Callable[[BaseHTTPRequestHandler, bytes], None]):
        self._on_post = on_post
        self.server: Optional[ThreadingHTTPServer] = None
        self.port = 0
        self.up()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def up(self) -> None:
        on_post = self._on_post

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                on_post(self, self.rfile.read(int(self.headers.get("Content-Length") or 0)))

        ThreadingHTTPServer.allow_reuse_address = True
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def down(self) -> None:
        """Stop listening: connections to the port are refused until up()."""
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def close(self) -> None:
        self.down()


class RawReceiver(LoopbackServer):
    """The benchmarks' receiver: answers 200 at once and decodes nothing; keeps (path, body bytes,
    arrival ns) of each request (keep=False: only counts their bytes)."""

    def __init__(self, keep: bool = True):
        self.keep = keep
        self.got: List[Tuple[str, bytes, int]] = []
        self.bytes = 0
        self._lock = threading.Lock()
        super().__init__(self._post)

    def _post(self, h: BaseHTTPRequestHandler, body: bytes) -> None:
        arrived = time.time_ns()
        with self._lock:
            self.bytes += len(body)
            if self.keep:
                self.got.append((h.path, body, arrived))
        answer(h, 200, b"{}")

    def take(self) -> List[Tuple[str, bytes, int]]:
        """The requests kept since the last take()."""
        with self._lock:
            got, self.got = self.got, []
        return got


class PushReceiver(LoopbackServer):
    """The tests' receiver: decodes every request (Received), with the behaviours of the failure tests."""

    def __init__(self):
        self.received: List[Received] = []
        self.requests = 0               # every request that reached a handler, answered or not
        self.status = 200
        self.retry_after: Optional[str] = None
        self.hang = False
        self.errors: List[str] = []     # payloads that did not decode (a test asserts none)
        self._cond = threading.Condition()
        self._release = threading.Event()
        super().__init__(self._handle)

    def close(self) -> None:
        self._release.set()
        self.down()

    def _handle(self, h: BaseHTTPRequestHandler, body: bytes) -> None:
        with self._cond:
            self.requests += 1
            self._cond.notify_all()
        if self.hang:
            self._release.wait()
            return
        if self.status != 200:
            answer(h, self.status, b"not today\n\n",
                   (("Retry-After", self.retry_after),) if self.retry_after is not None else ())
            return
        try:
            rec = self._decode(h, body)
        except Exception as e:      # an undecodable payload: told to the test, answered 400
            self.errors.append(f"{h.path}: {type(e).__name__}: {e}")
            answer(h, 400)
            return
        with self._cond:
            self.received.append(rec)
            self._cond.notify_all()
        answer(h, 200, b"{}")

    def _decode(self, h: BaseHTTPRequestHandler, body: bytes) -> Received:
        parts = urlsplit(h.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        headers = {k.lower(): v for k, v in h.headers.items()}
        if headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        if parts.path == PUSH_PATH:
            assert headers.get("content-type") == "application/proto", headers.get("content-type")
            req = PushRequest()
            req.ParseFromString(body)
            series = [({lp.name: lp.value for lp in s.labels}, [x.raw_profile for x in s.samples]) for s in req.series]
            return Received("push", query, headers, series=series)
        if parts.path == "/ingest":
            assert query.get("format") == "pprof" and query.get("name"), query
            raw = body
            if headers.get("content-type", "").startswith("multipart/form-data"):
                raw = _form_part(body, headers["content-type"], "profile")
            return Received("ingest", query, headers, raw=raw)
        if parts.path == OTLP_PATH:
            from opentelemetry.proto.collector.profiles.v1development.profiles_service_pb2 import (
                ExportProfilesServiceRequest)
            req = ExportProfilesServiceRequest()
            req.ParseFromString(body)
            return Received("otlp", query, headers, otlp=req, raw=body)
        raise ValueError(f"no endpoint {parts.path}")

    def wait_requests(self, n: int, timeout: float) -> int:
        with self._cond:
            self._cond.wait_for(lambda: self.requests >= n, timeout)
            return self.requests

    def wait_received(self, n: int, timeout: float) -> int:
        with self._cond:
            self._cond.wait_for(lambda: len(self.received) >= n, timeout)
            return len(self.received)


def _form_part(body: bytes, content_type: str, name: str) -> bytes:
    boundary = content_type.split("boundary=")[1].strip('"').encode()
    for part in body.split(b"--" + boundary):
        head, _, data = part.partition(b"\r\n\r\n")
        if f'name="{name}"'.encode() in head:
            return data[:-2] if data.endswith(b"\r\n") else data
    raise ValueError(f"no form part {name!r}")


def free_port_refusing() -> int:
    """A loopback port nothing listens on (bound, then released: a connect is refused)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_until(predicate, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
