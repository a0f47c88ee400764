from __future__ import annotations

import json
from array import array
from itertools import repeat
from typing import IO, Dict, List, Optional

from sdb_trace import PROC_SHIFT, SPAN_KINDS, STATE_BLOCKED, STATE_GVL_WAIT, STATE_RUNNING, STATE_UNKNOWN

from sdb_trace.output import printable_json

from ..samples import endpoint_name
from .base import Reporter
from .columns import Column
from .prefixes import StackTable

# The Firefox Profiler's processed format, version 47 (the viewer upgrades it on load): the fields
# are those of its src/types/profile.js at that version. Thread states are the categories.
PROCESSED_VERSION = 47
GECKO_VERSION = 27
CATEGORIES = [  # index = category; the first grey one is the default
    {"name": "Other", "color": "grey", "subcategories": ["Other"]},
    {"name": "Running", "color": "green", "subcategories": ["Other"]},
    {"name": "Waiting for GVL", "color": "orange", "subcategories": ["Other"]},
    {"name": "Blocked", "color": "transparent", "subcategories": ["Other"]},
    {"name": "Unknown state", "color": "darkgrey", "subcategories": ["Other"]},
    {"name": "Request or job", "color": "blue", "subcategories": ["Other"]},
]
STATE_CATEGORY = {STATE_RUNNING: 1, STATE_GVL_WAIT: 2, STATE_BLOCKED: 3, STATE_UNKNOWN: 4}
UNIT_CATEGORY = 5
STACK_CHUNK = 1 << 14   # stack table entries written at a time

# Requests, jobs and Sdb.label blocks are interval markers on their thread's track, of one marker
# type (the schema of the format's version 47: fields under "data", each with key, label, format).
# A unit that began before the recording has only its end (phase INTERVAL_END), one still running
# when it ended only its start (INTERVAL_START): the viewer draws them to the track's edge.
UNIT_MARKER = "SdbUnit"
INTERVAL, INTERVAL_START, INTERVAL_END = 1, 2, 3
MARKER_SCHEMA = [{
    "name": UNIT_MARKER,
    "display": ["marker-chart", "marker-table", "timeline-overview"],
    "chartLabel": "{marker.data.endpoint}",
    "tooltipLabel": "{marker.data.kind}: {marker.data.endpoint}",
    "tableLabel": "{marker.data.kind}: {marker.data.endpoint} {marker.data.request_id}",
    "data": [
        {"key": "kind", "label": "Kind", "format": "string", "searchable": True},
        {"key": "endpoint", "label": "Endpoint", "format": "string", "searchable": True},
        {"key": "request_id", "label": "Request or job id", "format": "string", "searchable": True},
        {"key": "status", "label": "Status", "format": "integer"},
    ],
}]


class _Thread:
    """One thread's tables: strings, functions, frames, the stack tree and the samples."""

    def __init__(self, thread):
        self.thread = thread
        self.strings: List[str] = []
        self.string_ids: Dict[str, int] = {}
        self.func_ids: Dict[tuple, int] = {}
        self.funcs: List[tuple] = []            # (name, file, first line, is Ruby)
        self.frame_ids: Dict[object, int] = {}
        self.frames: List[tuple] = []           # (func, line, category or None)
        self.frame_of: Dict[int, int] = {}      # id(Frame) -> frame index, for frames without a category
        self.pinned: List[object] = []          # those Frames (an id is theirs while they live)
        self.stack_table = StackTable()
        self.leaf: Dict[tuple, int] = {}        # (Stack.id, state) -> stack index (-1: empty)
        self.times = Column("d")
        self.stacks = Column("l")
        self.weights: Optional[Column] = None   # a measured sample type's values (else each sample counts 1)
        self.markers: List[tuple] = []          # (name, start ms, end ms, phase, data)

    def s(self, text: str) -> int:
        i = self.string_ids.get(text)
        if i is None:
            i = self.string_ids[text] = len(self.strings)
            self.strings.append(text)
        return i

    def frame(self, f, category=None) -> int:
        fkey = (f.label, f.path, f.line, category)
        i = self.frame_ids.get(fkey)
        if i is None:
            fkey2 = (f.label, f.path or "")
            fn = self.func_ids.get(fkey2)
            if fn is None:
                fn = self.func_ids[fkey2] = len(self.funcs)
                self.funcs.append((self.s(f.label), self.s(f.path) if f.path else None, bool(f.path)))
            i = self.frame_ids[fkey] = len(self.frames)
            self.frames.append((fn, f.line or None, category))
        return i

    def stack(self, stack, state: int) -> int:
        """The stack index of a sample. The state's category sits on the root frame (the other
        frames have none and inherit it, as the viewer derives a stack's category from its
        frames) and on every stack row (what the format's version 47 reads)."""
        key = (stack.id, state)
        i = self.leaf.get(key)
        if i is None:
            i = -1
            frames = stack.frames       # made on each read (a CompactStack's): once
            if frames:
                cat = STATE_CATEGORY.get(state, 4)
                rest = frames[1:]
                known = self.frame_of
                for fid, f in dict(zip(map(id, rest), rest)).items():   # new frames in order of first use
                    if fid not in known:
                        known[fid] = self.frame(f)
                        self.pinned.append(f)
                path = array("I", [self.frame(frames[0], cat)])
                path.extend(map(known.__getitem__, map(id, rest)))
                i = self.stack_table.add(path, cat)
            self.leaf[key] = i
        return i


class FirefoxReporter(Reporter):
    """The Firefox Profiler's processed profile (profiler.firefox.com, "Load a profile from file"):
    one track per thread, samples in time order, thread states as categories (Running, Waiting
    for GVL, Blocked, Unknown state), frames with their file and line; each request, job and
    Sdb.label block a marker on its thread's track (Marker Chart, Marker Table). The tracks show one
    sample type, the chosen one (--sample-type; wall by default: cpu's samples are its Running
    category); a measured type's samples are weighted by their values (weightType "bytes", or
    "tracing-ms" for nanoseconds)."""

    name = "firefox"
    extension = ".firefox.json"
    compact_stacks = True    # each stack's frames read once (samples.CompactStack)
    timeline = True
    values = True

    def __init__(self, recording, options):
        super().__init__(recording, options)
        self.threads: Dict[object, _Thread] = {}
        self.last_ns = self.start_ns

    def add(self, thread, stack, state, t_ns, count, values=None) -> None:
        th = self.threads.get(thread)
        if th is None:
            th = self.threads[thread] = _Thread(thread)
        i = th.stack(stack, state)
        t = (t_ns - self.start_ns) / 1e6
        if not self.sample_type.sampled and values is not None:
            if th.weights is None:
                th.weights = Column("d")
            th.weights.append(values[self.sample_type.index] / (1e6 if self.sample_type.unit == "nanoseconds" else 1))
            th.times.append(t)
            th.stacks.append(i)
            count = 0
        for _ in range(count):
            th.times.append(t)
            th.stacks.append(i)
        if t_ns > self.last_ns:
            self.last_ns = t_ns

    def _ms(self, ns):
        return None if ns is None else max((ns - self.start_ns) / 1e6, 0.0)

    def mark_units(self) -> None:
        """The spans the filters keep, as markers on their threads' tracks (a track is made for a
        thread whose samples were all left out, so its requests still show)."""
        if self.thread_of is None:
            return
        for sp in self.shown_spans:
            t = self.thread_of(sp["thread"])
            th = self.threads.get(t)
            if th is None:
                th = self.threads[t] = _Thread(t)
            begin, end = self._ms(sp["begin_ns"]), self._ms(sp["end_ns"])
            phase = INTERVAL if begin is not None and end is not None else \
                INTERVAL_START if begin is not None else INTERVAL_END
            name = endpoint_name(sp)
            data = {"type": UNIT_MARKER, "kind": SPAN_KINDS.get(sp["kind"], "unit"), "endpoint": name}
            if sp["request_id"]:
                data["request_id"] = sp["request_id"]
            if sp["end_ns"] is not None:
                data["status"] = sp["status"]
            th.markers.append((th.s(name), begin, end, phase, data))

    def thread_json(self, th: _Thread, end_ms: float) -> dict:
        """One thread's track; its process is the viewer's group of tracks (pid, name, its end)."""
        t = th.thread
        pr = t.process
        h = self.header
        pid = str(pr.pid if pr is not None else h.get("pid", 0))
        process_name = " ".join(pr.command if pr is not None else h.get("command") or []) or "ruby"
        ended = self._ms(pr.end_ns) if pr is not None and pr.end_ns is not None else None
        n_f, n_fr = len(th.funcs), len(th.frames)
        return {
            "processType": "default", "processName": process_name,
            "processStartupTime": self._ms(pr.start_ns) or 0 if pr is not None else 0,
            "processShutdownTime": ended if ended is not None else end_ms, "registerTime": self._ms(t.start_ns) or 0,
            "unregisterTime": self._ms(t.end_ns), "pausedRanges": [], "name": t.label,
            "isMainThread": t.main, "pid": pid, "tid": t.tid,
            "samples": None,    # written by write_samples, in chunks
            "markers": {"data": [m[4] for m in th.markers], "name": [m[0] for m in th.markers],
                        "startTime": [m[1] for m in th.markers], "endTime": [m[2] for m in th.markers],
                        "phase": [m[3] for m in th.markers], "category": [UNIT_CATEGORY] * len(th.markers),
                        "length": len(th.markers)},
            "stackTable": None,  # written by write_stack_table, in chunks
            "frameTable": {"address": [-1] * n_fr, "inlineDepth": [0] * n_fr, "category": [f[2] for f in th.frames],
                           "subcategory": [None if f[2] is None else 0 for f in th.frames],
                           "func": [f[0] for f in th.frames],
                           "nativeSymbol": [None] * n_fr, "innerWindowID": [0] * n_fr,
                           "implementation": [None] * n_fr, "line": [f[1] for f in th.frames],
                           "column": [None] * n_fr, "length": n_fr},
            "funcTable": {"name": [f[0] for f in th.funcs], "isJS": [f[2] for f in th.funcs],
                          "relevantForJS": [not f[2] for f in th.funcs], "resource": [-1] * n_f,
                          "fileName": [f[1] for f in th.funcs], "lineNumber": [None] * n_f,
                          "columnNumber": [None] * n_f, "length": n_f},
            "resourceTable": {"lib": [], "name": [], "host": [], "type": [], "length": 0},
            "nativeSymbols": {"libIndex": [], "address": [], "name": [], "functionSize": [], "length": 0},
            "stringArray": th.strings,
        }

    def render(self, out: IO) -> None:
        h = self.header
        self.mark_units()
        end_ms = self._ms(max(self.last_ns, self.end_ns or 0)) + self.period_ns / 1e6
        threads = sorted(self.threads.values(), key=lambda th: (th.thread.serial >> PROC_SHIFT, not th.thread.main,
                                                                th.thread.serial))
        profile = {
            "meta": {
                "interval": self.period_ns / 1e6, "startTime": h.get("start_wall_ns", 0) / 1e6,
                "profilingStartTime": 0, "profilingEndTime": end_ms, "processType": 0,
                "product": f"Ruby {h.get('ruby', '')} (sdb)", "stackwalk": 0, "debug": False,
                "version": GECKO_VERSION, "preprocessedProfileVersion": PROCESSED_VERSION, "symbolicated": True,
                "importedFrom": "sdb", "categories": CATEGORIES, "markerSchema": MARKER_SCHEMA,
                "sampleUnits": {"time": "ms", "eventDelay": "ms", "threadCPUDelta": "µs"},
                "usesOnlyOneStackType": True, "sourceCodeIsNotOnSearchfox": True,
                "initialVisibleThreads": list(range(len(threads))), "keepProfileThreadOrder": True,
                "extensions": {"baseURL": [], "id": [], "name": [], "length": 0},
            },
            "libs": [], "pages": [], "counters": [],
            "threads": [],
        }
        # everything but the sample columns and the stack table through the C encoder; those (what
        # grows with the recording's length and with its stacks' depth) streamed in chunks
        head = printable_json(json.dumps(profile, separators=(",", ":"), ensure_ascii=False))
        assert head.endswith('"threads":[]}')
        out.write(head[:-2])
        for k, th in enumerate(threads):
            text = printable_json(json.dumps(self.thread_json(th, end_ms), separators=(",", ":"),
                                             ensure_ascii=False))
            before, after = text.split('"samples":null', 1)
            middle, after = after.split('"stackTable":null', 1)
            out.write(("," if k else "") + before + '"samples":')
            self.write_samples(th, out)
            out.write(middle + '"stackTable":')
            self.write_stack_table(th, out)
            out.write(after)
            th.times.close()
            th.stacks.close()
        out.write("]}\n")

    def write_samples(self, th: _Thread, out: IO) -> None:
        out.write('{"stack":[')
        th.stacks.write(out, lambda s: str(s) if s >= 0 else "null")
        out.write('],"time":[')
        n = len(th.times)
        th.times.write(out, repr)
        if th.weights is None:
            out.write(f'],"weight":null,"weightType":"samples","length":{n}}}')
            return
        unit = self.sample_type.unit
        kind = "tracing-ms" if unit == "nanoseconds" else "bytes" if unit == "bytes" else "samples"
        out.write('],"weight":[')
        th.weights.write(out, repr)
        th.weights.close()
        out.write(f'],"weightType":"{kind}","length":{n}}}')

    @staticmethod
    def write_stack_table(th: _Thread, out: IO) -> None:
        table = th.stack_table
        n = len(table)

        def column(values, text=str):
            for i in range(0, n, STACK_CHUNK):
                out.write(("," if i else "") + ",".join(map(text, values[i:i + STACK_CHUNK])
                                                        if values is not None else repeat("0", min(STACK_CHUNK, n - i))))

        out.write('{"frame":[')
        column(table.frame)
        out.write('],"prefix":[')
        column(table.prefix, lambda p: "null" if p < 0 else str(p))
        out.write('],"category":[')
        column(table.category)
        out.write('],"subcategory":[')
        column(None)   # subcategory 0 throughout
        out.write(f'],"length":{n}}}')
