"""Grafana Pyroscope's ingestion, from its published API: the Connect push API (`POST
/push.v1.PusherService/Push`, a binary push.v1.PushRequest, gzip) and, for older servers, `POST
/ingest?name=&from=&until=&format=pprof&sampleRate=&spyName=` (the pprof as the body).

Each interval makes two profiles from the profile library's one pprof (its names untouched):
  wall (__name__ "wall"): every thread's samples, each labelled with its thread state;
  cpu (__name__ "process_cpu"): the samples of running threads alone, value type cpu/nanoseconds.
Labels: the series carries `service_name` and `__name__` (what a Pyroscope series is). Pyroscope
turns a pprof sample's string labels into series labels too, so the samples keep only the labels
whose values stay few: `thread_name`, `thread_state`, `pid` (as text), `process`, `endpoint`, `job`.
`thread_id` (one series per OS thread, churning with thread pools), `request_id` and `trace_id` (one
per request: unbounded) are left out for Pyroscope; `span_id` stays: Pyroscope keeps it per sample,
not as a series label (its span profiles, Grafana's trace-to-profiles links). That is 9 label names
at most, under its limit of 30. Its
other limits (16,000 samples, 4 MiB a profile) are kept by splitting a larger profile into several
RawSamples of the same series, which Pyroscope adds up."""
from __future__ import annotations

import gzip
import re
import uuid
from typing import Dict, List, Tuple
from urllib.parse import urlencode

from sdb_symbolize.protowire import message, string

from .cutter import Interval
from .queue import Payload

MAX_SAMPLES = 16000
MAX_PROFILE_BYTES = 4 << 20
MAX_LABEL_NAMES = 30
PUSH_PATH = "/push.v1.PusherService/Push"
DROPPED_LABELS = ("thread_id", "request_id", "trace_id")
# where the process runs (the agent writes them in the trace header when its cgroup says): series labels
PLACE_LABELS = ("container_id", "pod_uid")
WALL, CPU = "wall", "process_cpu"


# ------------------------------------------------------------------ the few push messages (protowire: the symbolizer's protobuf writer)
def label_pair(name: str, value: str) -> bytes:
    """types.v1.LabelPair {string name = 1; string value = 2}"""
    return string(1, name, keep=True) + string(2, value, keep=True)


def raw_sample(raw_profile: bytes, id_: str) -> bytes:
    """push.v1.RawSample {bytes raw_profile = 1; string ID = 2}"""
    return message(1, raw_profile, keep=True) + string(2, id_, keep=True)


def raw_profile_series(labels: List[Tuple[str, str]], samples: List[bytes]) -> bytes:
    """push.v1.RawProfileSeries {repeated LabelPair labels = 1; repeated RawSample samples = 2}"""
    return (b"".join(message(1, label_pair(k, v), keep=True) for k, v in labels)
            + b"".join(message(2, raw_sample(s, str(uuid.uuid4())), keep=True) for s in samples))


def push_request(series: List[bytes]) -> bytes:
    """push.v1.PushRequest {repeated RawProfileSeries series = 1}"""
    return b"".join(message(1, s, keep=True) for s in series)


# ------------------------------------------------------------------ the two profiles of an interval
def profiles(interval: Interval) -> Dict[str, List[bytes]]:
    """{"wall": [pprof chunks], "process_cpu": [...]}: each chunk an encoded perftools Profile within
    Pyroscope's limits (empty list: no sample of that kind). Both are built from one sample pass by
    the pprof reporter's own encoder (PprofReporter.build's views): the same names and values."""
    from sdb_trace import STATE_RUNNING
    reporter = interval.collect("pprof")
    # a format-4 recording's pprof has a column per sample type (samples, wall, cpu): each profile keeps
    # its own; an older one has no cpu column and the cpu profile is the wall column of running samples
    names = ["samples"] + [t.name for t in reporter.sample_types]
    wall_cols = [i for i, n in enumerate(names) if n != "cpu"]
    cpu_cols = [i for i, n in enumerate(names) if n != "wall"] if "cpu" in names else wall_cols
    span = dict(time_nanos=interval.start_wall_ns,
                duration_nanos=max(0, interval.end_wall_ns - interval.start_wall_ns))
    wall = reporter.build(columns=wall_cols, omit=DROPPED_LABELS, text_labels=True, **span)
    # the cpu profile's values are cpu nanoseconds: a running thread's sample stands for its tick
    cpu = reporter.build(columns=cpu_cols, states=(STATE_RUNNING,), omit=DROPPED_LABELS, text_labels=True,
                         retype=("nanoseconds", "cpu"), **span)
    return {WALL: split(wall), CPU: split(cpu)}


def split(p, samples=None) -> List[bytes]:
    """p (an encoded Profile: PprofReporter.build) as chunks of at most MAX_SAMPLES samples and
    MAX_PROFILE_BYTES bytes (each a whole profile: the tables are repeated, the samples divided)."""
    samples = p.samples if samples is None else samples
    if not samples:
        return []
    size = len(p.head) + len(p.tail) + sum(map(len, samples))
    if len(samples) <= MAX_SAMPLES and size <= MAX_PROFILE_BYTES:
        return [p.bytes(samples)]
    if len(samples) == 1:
        return []                   # one sample over 4 MiB: nothing to split (never seen)
    half = len(samples) // 2
    return split(p, samples[:half]) + split(p, samples[half:])


def encode(interval: Interval, service: str, ingest: bool) -> List[Payload]:
    """The requests that send this interval's profiles."""
    chunks = profiles(interval)
    place = place_labels(interval.header)
    if not ingest:
        series = []
        n = 0
        for name, parts in chunks.items():
            if not parts:
                continue
            raws = [gzip.compress(c, compresslevel=6, mtime=0) for c in parts]
            series.append(raw_profile_series([("service_name", service), ("__name__", name), *place], raws))
            n += len(parts)
        body = gzip.compress(push_request(series), compresslevel=6, mtime=0)
        return [Payload(PUSH_PATH, body, {"Content-Type": "application/proto", "Content-Encoding": "gzip",
                                          "Connect-Protocol-Version": "1"}, profiles=n, samples=interval.samples)]
    out = []
    rate = interval.header.get("rate_hz") or 0
    for name, parts in chunks.items():
        for c in parts:
            app = f"{ingest_name(service)}.{'cpu' if name == CPU else 'wall'}"
            if place:
                app += "{" + ",".join(f"{k}={ingest_name(v)}" for k, v in place) + "}"
            query = urlencode({"name": app, "from": interval.start_wall_ns // 10**9,
                               "until": -(-interval.end_wall_ns // 10**9), "format": "pprof",
                               "sampleRate": int(round(rate)), "spyName": "sdb"})
            out.append(Payload(f"/ingest?{query}", gzip.compress(c, compresslevel=6, mtime=0),
                               {"Content-Type": "application/octet-stream"}, samples=interval.samples))
    return out


def place_labels(header: dict) -> List[Tuple[str, str]]:
    """The trace header's container and pod labels, those it has."""
    return [(k, header[k]) for k in PLACE_LABELS if isinstance(header.get(k), str) and header[k]]


_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]")


def ingest_name(service: str) -> str:
    """The application name in /ingest's `name` (whose `{`, `}`, `,` and `=` are syntax)."""
    return _NAME_UNSAFE.sub("_", service) or "unknown"
