from __future__ import annotations

import gzip
from typing import IO, Dict, List, Optional, Tuple

from sdb_trace import SPAN_KINDS

from ..protowire import message, packed_varints, string, uint
from ..samples import endpoint_name, state_name
from .base import Reporter


class PprofReporter(Reporter):
    """pprof's profile.proto, gzipped (go tool pprof, Grafana Pyroscope, Polar Signals...), written
    with protowire's hand encoding: the bytes the protobuf classes of sdb_symbolize.pprof serialize
    (those classes, go tool pprof and pprof-format stay independent readers for the tests), without
    an object per field (a push encodes a profile every interval). A value per sample for samples/count, then
    one for each of the recording's sample types (wall/nanoseconds: count x the tick period;
    cpu/nanoseconds: the same for running threads, 0 for the others; a measured type's summed
    values), the chosen type (--sample-type, else the first) its default_sample_type when it has
    several; labels "thread_id" (Linux tid), "thread_name",
    "thread_state" and "pid"; when the trace has requests or jobs, also a sample's unit of work:
    "endpoint" (a request's or label's) or "job" (a job's class), "request_id" (a request id or
    jid, when it has one), and "span_id" and "trace_id" (its trace context, lowercase hex, when the
    request had one). One location per (function, line); functions by label and file."""

    name = "pprof"
    extension = ".pb.gz"
    binary = True
    units_if_any = True     # by_unit when the trace has spans (Reporter.__init__)
    values = all_types = True

    def __init__(self, recording, options):
        super().__init__(recording, options)
        self.counts: Dict[Tuple, list] = {}     # key -> [samples, value of each type...]

    def add(self, thread, stack, state, t_ns, count, values=None) -> None:
        self.add_unit(thread, stack, state, t_ns, count, None, values)

    def add_unit(self, thread, stack, state, t_ns, count, unit, values=None) -> None:
        key = (thread, stack, state, unit["span"] if unit is not None else 0)
        acc = self.counts.get(key)
        if acc is None:
            acc = self.counts[key] = [0] * (1 + len(self.sample_types))
        acc[0] += count
        if values is None:          # a caller that knows no types: count samples of the first
            values = (count * (self.sample_types[0].value or 1),)
        for i, v in enumerate(values, 1):
            if v:
                acc[i] += v

    def build(self, columns=None, states=None, omit=(), text_labels: bool = False,
              retype: Optional[Tuple[str, str]] = None, time_nanos: Optional[int] = None,
              duration_nanos: Optional[int] = None) -> "Encoded":
        """The profile, a pprof Profile message encoded by hand (protowire; fields in number order,
        proto3's packing and defaults, so the bytes are those protobuf's own serializer gives), its
        samples apart so that it can be split (Encoded). A view of it, for a caller that makes several
        profiles of one pass (the sidecar's Pyroscope push: a wall and a cpu profile): `columns`, the
        value columns it keeps (0 samples/count, then one per sample type; None: all, and the last
        kept is then its default_sample_type), `states` the thread states of the samples it keeps
        (None: all), `omit` label keys left out, `text_labels` numeric labels as text, `retype`
        (unit, type): the value types (period type included) of that unit are of that type;
        `time_nanos`/`duration_nanos` in place of the recording's."""
        strings: Dict[str, int] = {}

        def s(text: str) -> int:
            i = strings.get(text)
            if i is None:
                i = strings[text] = len(strings)
            return i

        def value_type(typ: str, unit: str) -> bytes:
            if retype is not None and unit == retype[0]:
                typ = retype[1]
            return uint(1, s(typ)) + uint(2, s(unit))

        s("")
        types = self.sample_types
        all_columns = [("samples", "count")] + [(t.name, t.unit) for t in types]
        kept = all_columns if columns is None else [all_columns[i] for i in columns]
        head = b"".join(message(1, value_type(typ, unit), keep=True) for typ, unit in kept)
        first = types[0]
        period_type = value_type(first.name, first.unit)
        if columns is not None:
            default_type = s(retype[1] if retype is not None and kept[-1][1] == retype[0] else kept[-1][0])
        else:
            default_type = s(self.sample_type.name) if self.names_type else 0
        h = self.header
        functions: Dict[Tuple, int] = {}
        locations: Dict[Tuple, int] = {}
        function_msgs: List[bytes] = []
        location_msgs: List[bytes] = []
        stack_locs: Dict[object, bytes] = {}
        k_tid, k_name, k_state, k_pid = (None if k in omit else s(k) for k in ("thread_id", "thread_name",
                                                                               "thread_state", "pid"))
        k_process = s("process") if len(self.processes) > 1 and "process" not in omit else None
        keys = (k_tid, k_name, k_state, k_pid, k_process)
        # a sample's labels by (thread, state, unit): made at its first sample, in this order, so the
        # strings they add are numbered as they would be sample by sample
        labels_of: Dict[Tuple, bytes] = {}
        samples: List[bytes] = []
        for (thread, stack, state, unit), vals in sorted(self.counts.items(),
                                                      key=lambda kv: (kv[0][0].serial, kv[0][1].id, kv[0][2],
                                                                      kv[0][3])):
            if states is not None and state not in states:
                continue
            locs = stack_locs.get(stack)
            if locs is None:
                ids = []
                for f in reversed(stack.frames):   # leaf first
                    fkey = (f.label, f.path or "")
                    fid = functions.get(fkey)
                    if fid is None:
                        fid = functions[fkey] = len(functions) + 1
                        name, filename = s(f.label), s(f.path or "")
                        function_msgs.append(message(5, uint(1, fid) + uint(2, name) + uint(3, name)
                                                     + uint(4, filename), keep=True))
                    lkey = (fid, f.line)
                    lid = locations.get(lkey)
                    if lid is None:
                        lid = locations[lkey] = len(locations) + 1
                        line = message(4, uint(1, fid) + uint(2, f.line), keep=True)
                        location_msgs.append(message(4, uint(1, lid) + line, keep=True))
                    ids.append(lid)
                locs = stack_locs[stack] = packed_varints(1, ids)
            labels = labels_of.get((thread, state, unit))
            if labels is None:
                labels = labels_of[(thread, state, unit)] = self._labels(thread, state, unit, s, keys, text_labels,
                                                                          omit)
            values = packed_varints(2, vals if columns is None else [vals[i] for i in columns])
            samples.append(message(2, locs + values + labels, keep=True))
        if time_nanos is None:
            time_nanos = h.get("start_wall_ns", 0)
        if duration_nanos is None and self.end_ns and h.get("start_mono_ns"):
            duration_nanos = max(self.end_ns - h["start_mono_ns"], 0)
        tail = (b"".join(location_msgs) + b"".join(function_msgs)
                + b"".join([string(6, t, keep=True) for t in strings])     # dicts keep insertion order
                + uint(9, time_nanos) + uint(10, duration_nanos or 0) + message(11, period_type, keep=True)
                + uint(12, first.value or 0) + uint(14, default_type))
        return Encoded(head, samples, tail)

    def _labels(self, thread, state: int, unit: int, s, keys: tuple, text_labels: bool, omit) -> bytes:
        """A sample's Label fields: its thread's (keys: the label keys' string indices, None: left
        out), its state's and its unit of work's; s numbers the strings."""
        k_tid, k_name, k_state, k_pid, k_process = keys
        pr = thread.process
        labels = []
        for key, num, text in ((k_tid, thread.tid, None), (k_name, None, thread.name or thread.label),
                               (k_state, None, state_name(state)),
                               (k_pid, pr.pid if pr is not None else self.header.get("pid", 0), None),
                               (k_process, None, pr.label if pr is not None else None)):
            if key is None:
                continue
            if text is not None:
                labels.append(message(3, uint(1, key) + uint(2, s(text)), keep=True))
            elif not text_labels:
                labels.append(message(3, uint(1, key) + uint(3, num or 0), keep=True))
            else:
                labels.append(message(3, uint(1, key) + (uint(2, s(str(num))) if num is not None else b""),
                                      keep=True))
        u = self.spans.get(unit) if unit else None
        if u is not None:
            kind = "job" if SPAN_KINDS.get(u["kind"]) == "job" else "endpoint"
            for key, text in ((kind, endpoint_name(u)), ("request_id", u["request_id"]),
                              ("span_id", u.get("span_id")), ("trace_id", u.get("trace_id"))):
                if text and key not in omit:
                    labels.append(message(3, uint(1, s(key)) + uint(2, s(text)), keep=True))
        return b"".join(labels)

    def render(self, out: IO) -> None:
        out.write(gzip.compress(self.build().bytes(), compresslevel=6, mtime=0))


class Encoded:
    """A pprof Profile's bytes in three parts: `head` (its sample types, field 1), `samples` (each
    Sample, field 2) and `tail` (every later field: locations, functions, strings, times, period):
    head + any of the samples + tail is a whole Profile with the same tables (how a profile over a
    size limit is split)."""
    __slots__ = ("head", "samples", "tail")

    def __init__(self, head: bytes, samples: List[bytes], tail: bytes):
        self.head, self.samples, self.tail = head, samples, tail

    def bytes(self, samples: Optional[List[bytes]] = None) -> bytes:
        return b"".join([self.head, *(self.samples if samples is None else samples), self.tail])
