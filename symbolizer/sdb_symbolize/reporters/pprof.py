from __future__ import annotations

import gzip
from typing import IO, Dict, Tuple

from sdb_trace import SPAN_KINDS

from ..samples import endpoint_name, state_name
from .base import Reporter


class PprofReporter(Reporter):
    """pprof's profile.proto, gzipped (go tool pprof, Grafana Pyroscope, Polar Signals...), built
    with the protobuf classes of sdb_symbolize.pprof. A value per sample for samples/count, then
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

    def build(self):
        from ..pprof import Profile
        p = Profile()
        strings: Dict[str, int] = {}

        def s(text: str) -> int:
            i = strings.get(text)
            if i is None:
                i = strings[text] = len(p.string_table)
                p.string_table.append(text)
            return i

        s("")
        types = self.sample_types
        for typ, unit in [("samples", "count")] + [(t.name, t.unit) for t in types]:
            vt = p.sample_type.add()
            vt.type, vt.unit = s(typ), s(unit)
        first = types[0]
        p.period_type.type, p.period_type.unit = s(first.name), s(first.unit)
        p.period = first.value or 0
        if self.names_type:
            p.default_sample_type = s(self.sample_type.name)
        h = self.header
        p.time_nanos = h.get("start_wall_ns", 0)
        functions: Dict[Tuple, int] = {}
        locations: Dict[Tuple, int] = {}
        stack_locs: Dict[object, list] = {}
        k_tid, k_name, k_state, k_pid = s("thread_id"), s("thread_name"), s("thread_state"), s("pid")
        k_process = s("process") if len(self.processes) > 1 else None
        spans = self.spans
        for (thread, stack, state, unit), vals in sorted(self.counts.items(),
                                                      key=lambda kv: (kv[0][0].serial, kv[0][1].id, kv[0][2],
                                                                      kv[0][3])):
            locs = stack_locs.get(stack)
            if locs is None:
                locs = []
                for f in reversed(stack.frames):   # leaf first
                    fkey = (f.label, f.path or "")
                    fid = functions.get(fkey)
                    if fid is None:
                        fid = functions[fkey] = len(functions) + 1
                        fn = p.function.add()
                        fn.id, fn.name, fn.system_name, fn.filename = fid, s(f.label), s(f.label), s(f.path or "")
                    lkey = (fid, f.line)
                    lid = locations.get(lkey)
                    if lid is None:
                        lid = locations[lkey] = len(locations) + 1
                        loc = p.location.add()
                        loc.id = lid
                        line = loc.line.add()
                        line.function_id, line.line = fid, f.line
                    locs.append(lid)
                stack_locs[stack] = locs
            sample = p.sample.add()
            sample.location_id.extend(locs)
            sample.value.extend(vals)
            pr = thread.process
            for key, num, text in ((k_tid, thread.tid, None), (k_name, None, thread.name or thread.label),
                                   (k_state, None, state_name(state)),
                                   (k_pid, pr.pid if pr is not None else h.get("pid", 0), None),
                                   (k_process, None, pr.label if pr is not None else None)):
                if key is None:
                    continue
                label = sample.label.add()
                label.key = key
                if text is None:
                    label.num = num or 0
                else:
                    label.str = s(text)
            u = spans.get(unit) if unit else None
            if u is not None:
                kind = "job" if SPAN_KINDS.get(u["kind"]) == "job" else "endpoint"
                for key, text in ((kind, endpoint_name(u)), ("request_id", u["request_id"]),
                                  ("span_id", u.get("span_id")), ("trace_id", u.get("trace_id"))):
                    if text:
                        label = sample.label.add()
                        label.key, label.str = s(key), s(text)
        if self.end_ns and h.get("start_mono_ns"):
            p.duration_nanos = max(self.end_ns - h["start_mono_ns"], 0)
        return p

    def render(self, out: IO) -> None:
        out.write(gzip.compress(self.build().SerializeToString(), compresslevel=6, mtime=0))
