"""OpenTelemetry profiles (OTLP): one binary `ExportProfilesServiceRequest` of opentelemetry-proto
v1.10.0 (package opentelemetry.proto.collector.profiles.v1development; the PyPI package
opentelemetry-proto 1.45.2 is generated from it), written with protowire's hand encoding.

What a reader of it must know (docs/guide.md says it for users):
- One ResourceProfiles per recorded process (a process tree gives several); resource attributes
  `service.name` (ProfileOptions.service, else the trace header's `service`: the recording's
  --service or the name the app gave, else the recording's first process's title),
  `host.name` (when the trace has it), `process.pid`, `process.parent_pid` (when known),
  `process.runtime.name` = `ruby`, `process.runtime.version` and `process.runtime.description`;
  `container.id` and `k8s.pod.uid` when the trace header has them (the agent's, from the cgroup).
  One ScopeProfiles (scope `sdb`, its version) holding one Profile per sample type
  (profile_types): `wall`/nanoseconds (every sample the filters keep) and `cpu`/nanoseconds (those
  of running threads), each with period_type `wall`/nanoseconds and period the tick period.
- One shared ProfilesDictionary; index 0 of every table is its zero value (string_table[0] = "",
  empty Mapping, Location, Function, Link, KeyValueAndUnit and Stack); nothing else is repeated.
- A Sample per distinct (stack, attributes): its `timestamps_unix_nano` (each sample's time, in
  order) and `values` (what each weighs: the tick period in ns), the same length.
- Stacks are leaf first. A location per (function, line), one Line each; a function per (label,
  file) with the same names sdb-symbolize's other formats show (the one naming path, resolve.py):
  a frame no name could be proven for stays `(unknown ISeq 0x...)`, and each profile counts the
  samples with such a frame in its attribute `sdb.samples.unnamed`. Frames read from Ruby's stack
  carry `profile.frame.type` = `ruby` (on their Location, and on the Ruby Mapping they point to);
  frames sdb adds (`(truncated)`, --states and --by roots) carry no type and no mapping.
- Sample attributes: `thread.id` (the Linux thread id, as the OpenTelemetry eBPF profiler gives
  it: sdb does not read Ruby's Thread#object_id), `thread.name` (when the thread has a name),
  `sdb.thread.state` (running, waiting for GVL, blocked, unknown), and `sdb.endpoint` (a request's
  or label's endpoint) or `sdb.job` (a job's class) when the sample was in one that was named.
- A sample in a request with a trace context (the gem's: OpenTelemetry's current span, else the
  `traceparent` header's ids) points at its Link (link_index): that trace id and span id. The
  link table holds one Link per distinct pair, after the zero value.
Strings from the target go in as they are (UTF-8 data in string fields: nothing is escaped in a
binary format, and nothing in it is ever interpreted)."""
from __future__ import annotations

import hashlib
from array import array
from dataclasses import dataclass
from typing import IO, Dict, FrozenSet, List, Optional, Tuple

from sdb_trace import SPAN_KINDS, STATE_NAMES, STATE_RUNNING, __version__

from ..labels import TRUNCATED_LABEL
from ..protowire import (fixed64, message, packed_fixed64, packed_varints, repeated_varint, string, uint)
from ..resolve import UNKNOWN_ISEQ_PREFIX
from ..samples import NO_UNIT, state_name
from .base import Reporter

PROTO_VERSION = "v1.10.0"          # opentelemetry-proto's release whose profiles.proto this writes
SCOPE_NAME = "sdb"
RUNTIME_NAME = "ruby"              # RUBY_ENGINE of CRuby, the only Ruby sdb reads
FRAME_TYPE_KEY, FRAME_TYPE_RUBY = "profile.frame.type", "ruby"
UNNAMED_KEY = "sdb.samples.unnamed"
THREAD_ID, THREAD_NAME, THREAD_STATE = "thread.id", "thread.name", "sdb.thread.state"
ENDPOINT_KEY, JOB_KEY = "sdb.endpoint", "sdb.job"
UNKNOWN_SERVICE = "unknown_service:ruby"    # OpenTelemetry's default for a service that gave no name

_INT64_MAX = (1 << 63) - 1
_UINT64_MAX = (1 << 64) - 1
# frames sdb adds above or below what it read: no frame type, no mapping
_MADE_UP = frozenset({TRUNCATED_LABEL, NO_UNIT} | {f"({name})" for name in STATE_NAMES.values()})


@dataclass(frozen=True)
class ProfileType:
    """One OTLP profile of a process: a sample type, and which of the samples it counts."""
    name: str
    unit: str
    states: Optional[FrozenSet[int]]    # the samples of threads in these states (None: every sample)


def profile_types(reporter: Reporter) -> List[ProfileType]:
    """The profiles each process gets, one per sdb sample type. A trace measures time: `wall` (every
    sample the filters keep, each one tick period) and `cpu` (those of running threads: holding the
    GVL on Ruby >= 3.2, on a CPU on 3.1), derived from each sample's thread state. When a trace
    declares its own sample types, this is the one place that turns them into profiles."""
    return [ProfileType("wall", "nanoseconds", None),
            ProfileType("cpu", "nanoseconds", frozenset((STATE_RUNNING,)))]


def _from_ruby(f) -> bool:
    """The frame was read from Ruby's stack (a Ruby or C method, GC, an unnamed ISeq), not added by
    sdb (a thread state, a unit of work, the truncation mark): a root C function is the only frame
    read without a path, and none is called `[...]` or by one of the made-up labels."""
    if f.path is not None:
        return True
    label = f.label
    return label not in _MADE_UP and not (label.startswith("[") and label.endswith("]"))


class _Table:
    """One table of the dictionary: encoded entries by key, entry 0 the zero value (empty)."""
    __slots__ = ("index", "entries")

    def __init__(self):
        self.index: Dict[object, int] = {}
        self.entries: List[bytes] = [b""]

    def add(self, key, body: bytes) -> int:
        i = self.index.get(key)
        if i is None:
            i = self.index[key] = len(self.entries)
            self.entries.append(body)
        return i


class _Dictionary:
    """The request's ProfilesDictionary, built as profiles refer to it."""

    def __init__(self):
        self.strings: Dict[str, int] = {"": 0}
        self.mappings, self.locations, self.functions = _Table(), _Table(), _Table()
        self.attributes, self.stacks, self.links = _Table(), _Table(), _Table()
        self._ruby_mapping = 0
        self._by_frame: Dict[str, int] = {}        # Frame.name (its identity) -> location
        self._by_stack: Dict[int, int] = {}        # Stack.id -> stack

    def s(self, text: str) -> int:
        i = self.strings.get(text)
        if i is None:
            i = self.strings[text] = len(self.strings)
        return i

    def attribute(self, key: str, value) -> int:
        """A KeyValueAndUnit: `value` a str (AnyValue.string_value) or an int (int_value)."""
        if isinstance(value, str):
            any_value = string(1, value, keep=True)     # a oneof member is written even when empty
        else:
            any_value = uint(3, value, keep=True)
        return self.attributes.add((key, type(value), value),
                                   uint(1, self.s(key)) + message(2, any_value, keep=True))

    def link(self, trace_id: str, span_id: str) -> int:
        """A Link (trace_id 16 bytes, span_id 8 bytes) from the trace's lowercase hex ids."""
        return self.links.add((trace_id, span_id), message(1, bytes.fromhex(trace_id), keep=True)
                              + message(2, bytes.fromhex(span_id), keep=True))

    def ruby_mapping(self) -> int:
        if not self._ruby_mapping:
            ruby = self.attribute(FRAME_TYPE_KEY, FRAME_TYPE_RUBY)
            self._ruby_mapping = self.mappings.add("ruby", packed_varints(5, (ruby,)))
        return self._ruby_mapping

    def location(self, f) -> int:
        i = self._by_frame.get(f.name)
        if i is not None:
            return i
        label, path = f.label, f.path or ""
        fn = self.functions.add((label, path), uint(1, self.s(label)) + uint(2, self.s(label)) + uint(3, self.s(path)))
        line = message(3, uint(1, fn) + uint(2, f.line), keep=True)
        if _from_ruby(f):
            body = uint(1, self.ruby_mapping()) + line + packed_varints(4, (self.attribute(FRAME_TYPE_KEY,
                                                                                          FRAME_TYPE_RUBY),))
            key = (fn, f.line, True)
        else:
            body, key = line, (fn, f.line, False)
        i = self._by_frame[f.name] = self.locations.add(key, body)
        return i

    def stack(self, stack) -> int:
        """The stack's index (leaf first); 0, the zero value, for a stack without frames."""
        i = self._by_stack.get(stack.id)
        if i is None:
            known = self._by_frame      # most frames have their location already (no call then)
            locs = tuple([known.get(f.name) or self.location(f) for f in reversed(stack.frames)])
            i = self._by_stack[stack.id] = self.stacks.add(locs, packed_varints(1, locs)) if locs else 0
        return i

    def encode(self) -> bytes:
        out = [message(1, e, keep=True) for e in self.mappings.entries]
        out += [message(2, e, keep=True) for e in self.locations.entries]
        out += [message(3, e, keep=True) for e in self.functions.entries]
        out += [message(4, e, keep=True) for e in self.links.entries]
        out += [string(5, t, keep=True) for t in self.strings]     # dicts keep insertion order
        out += [message(6, e, keep=True) for e in self.attributes.entries]
        out += [message(7, e, keep=True) for e in self.stacks.entries]
        return b"".join(out)


def _resource_attribute(key: str, value) -> bytes:
    """A common.v1.KeyValue (Resource.attributes are the plain form: key as a string)."""
    any_value = string(1, value, keep=True) if isinstance(value, str) else uint(3, value, keep=True)
    return message(1, string(1, key) + message(2, any_value, keep=True), keep=True)


class OtlpReporter(Reporter):
    """OTLP profiles: one ExportProfilesServiceRequest (module docstring), every sample with its
    time: what `-f otlp` writes, and the body of a POST to an OTLP/HTTP `/v1development/profiles`."""

    name = "otlp"
    extension = ".otlp.pb"
    binary = True
    timeline = True         # each sample's time (timestamps_unix_nano)
    units_if_any = True     # by_unit when the trace has spans: the endpoint attributes

    def __init__(self, recording, options):
        super().__init__(recording, options)
        # (Thread, Stack, state, unit) -> the times of its samples (CLOCK_MONOTONIC ns); unit: None, or
        # (its attribute or None, its (trace id, span id) or None)
        self.times: Dict[Tuple, array] = {}
        self._units: Dict[int, Optional[Tuple]] = {}
        self._has_unnamed: Dict[int, bool] = {}     # Stack.id -> it has a frame no name was proven for
        self._to_unix = (self.header.get("start_wall_ns") or 0) - self.start_ns

    def add(self, thread, stack, state, t_ns, count) -> None:
        key = (thread, stack, state, None)
        ts = self.times.get(key)
        if ts is None:
            ts = self.times[key] = array("q")
        if count == 1:
            try:
                ts.append(t_ns)
                return
            except (OverflowError, TypeError):
                pass
        self._add_slow(ts, t_ns, count)

    def add_times(self, thread, stack, state, base_ns: int, dts: list) -> None:
        """One sample at each base_ns + dt (the sample pass's grouped timeline: the times of a
        (thread, stack, state) in one call; the order of samples across keys is not kept, nor needed:
        each Sample's timestamps are sorted when written)."""
        key = (thread, stack, state, None)
        ts = self.times.get(key)
        if ts is None:
            ts = self.times[key] = array("q")
        if not base_ns and type(dts) is array and dts.typecode == "q":
            ts.extend(dts)          # the times themselves (grouped.py)
            return
        try:
            ts.extend(array("q", map(base_ns.__add__, dts)))    # whole or nothing: a C loop
        except OverflowError:
            for dt in dts:
                self._add_slow(ts, base_ns + dt, 1)

    def add_unit(self, thread, stack, state, t_ns, count, unit) -> None:
        self._add_slow(self._unit_times(thread, stack, state, unit), t_ns, count)

    def add_unit_times(self, thread, stack, state, times: array, unit) -> None:
        """add_unit of one sample at each of `times` (array('q'): grouped.py)."""
        self._unit_times(thread, stack, state, unit).extend(times)

    def _unit_times(self, thread, stack, state, unit) -> array:
        """The times kept for (thread, stack, state) in `unit` (its attribute and link)."""
        attr = None
        if unit is not None:
            span = unit["span"]
            attr = self._units.get(span, False)
            if attr is False:
                name = link = None
                if unit["endpoint"] is not None:
                    name = (JOB_KEY if SPAN_KINDS.get(unit["kind"]) == "job" else ENDPOINT_KEY, unit["endpoint"])
                if unit.get("trace_id") and unit.get("span_id"):
                    link = (unit["trace_id"], unit["span_id"])
                attr = self._units[span] = (name, link) if name or link else None
        key = (thread, stack, state, attr)
        ts = self.times.get(key)
        if ts is None:
            ts = self.times[key] = array("q")
        return ts

    def _add_slow(self, ts: array, t_ns, count: int) -> None:
        if t_ns is None:            # not a timeline pass (no caller does this today): at the start
            t_ns = self.start_ns
        if not -_INT64_MAX - 1 <= t_ns <= _INT64_MAX:     # a time no clock gives (a hostile trace): at the bound
            t_ns = _INT64_MAX if t_ns > 0 else -_INT64_MAX - 1
        for _ in range(count):
            ts.append(t_ns)

    # ------------------------------------------------------------------ the request
    def render(self, out: IO) -> None:
        out.write(self.encode())

    def encode(self) -> bytes:
        d = _Dictionary()
        types = profile_types(self)
        window = self._window()
        by_process: Dict[object, list] = {}
        for key in self.times:
            by_process.setdefault(key[0].process, []).append(key)
        processes = list(self.processes) or [None]
        processes += [p for p in by_process if p not in processes]     # a thread of no kept process
        given = self.header.get("service")     # the recording's --service, else the app's own
        given = given if isinstance(given, str) else None
        service = self.options.service or given or self._title() or UNKNOWN_SERVICE
        scope = string(1, SCOPE_NAME) + string(2, __version__)
        body = []
        for pr in processes:
            resource = self._resource(pr, service)
            keys = by_process.get(pr, [])
            profiles = [self._profile(d, t, keys, window, resource) for t in types]
            scope_profiles = message(1, scope) + b"".join(message(2, p, keep=True) for p in profiles)
            body.append(message(1, message(1, resource, keep=True) + message(2, scope_profiles, keep=True),
                                keep=True))
        body.append(message(2, d.encode(), keep=True))
        return b"".join(body)

    def _title(self) -> str:
        """The recording's process title (its first process's, or the header's command)."""
        pr = self.processes[0] if self.processes else None
        command = pr.command if pr is not None else self.header.get("command")
        title = " ".join(c for c in command or () if isinstance(c, str))
        limit = 80
        return title if len(title) <= limit else title[:limit - 3] + "..."

    def _resource(self, pr, service: str) -> bytes:
        h = self.header
        rec = (self.recording.process_records or {}).get(pr.proc) if pr is not None else None
        rec = rec or {}
        pid = pr.pid if pr is not None else h.get("pid")
        ppid = pr.ppid if pr is not None else None
        version = rec.get("ruby") or h.get("ruby")
        description = rec.get("ruby_description") or h.get("ruby_description")
        attrs = [("service.name", service), ("host.name", h.get("hostname")), ("process.pid", pid),
                 ("process.parent_pid", ppid), ("process.runtime.name", RUNTIME_NAME),
                 ("process.runtime.version", version), ("process.runtime.description", description),
                 ("container.id", h.get("container_id")), ("k8s.pod.uid", h.get("pod_uid"))]
        return b"".join(_resource_attribute(k, v) for k, v in attrs
                        if isinstance(v, str) and v or type(v) is int and v > 0)

    def _window(self) -> Tuple[int, int]:
        """(start, end) of every profile, CLOCK_MONOTONIC ns: the recording's (narrowed by
        --from/--to), widened to hold every sample's time."""
        o, start = self.options, self.start_ns
        lo = start + int(o.from_s * 1e9) if o.from_s is not None else start
        hi = self.end_ns if self.end_ns else None
        if o.to_s is not None:
            cut = start + int(o.to_s * 1e9)
            hi = cut if hi is None else min(hi, cut)
        for ts in self.times.values():
            first, last = min(ts), max(ts)
            lo = min(lo, first)
            hi = last + 1 if hi is None else max(hi, last + 1)
        return lo, hi if hi is not None else lo

    def _unix(self, mono_ns: int) -> int:
        """A CLOCK_MONOTONIC time of the trace as Unix ns (the header's two clocks at its start)."""
        t = mono_ns + self._to_unix
        return min(max(t, 0), _UINT64_MAX)

    def _stamps(self, parts: List[array]) -> array:
        """The Unix times of samples in `parts` (monotonic ns), in order, as fixed64s."""
        times = sorted(parts[0]) if len(parts) == 1 else sorted(t for ts in parts for t in ts)
        off = self._to_unix
        if times and times[0] + off >= 0 and times[-1] + off <= _UINT64_MAX:
            return array("Q", [t + off for t in times])
        return array("Q", [self._unix(t) for t in times])

    def _profile(self, d: _Dictionary, typ: ProfileType, keys: list, window: Tuple[int, int],
                 resource: bytes) -> bytes:
        period = self.period_ns
        merged: Dict[Tuple[int, Tuple[int, ...], int], List[array]] = {}
        unnamed = 0
        attrs_of: Dict[Tuple, Tuple[int, ...]] = {}
        has_unnamed = self._has_unnamed
        for key in keys:
            thread, stack, state, unit = key
            if typ.states is not None and state not in typ.states:
                continue
            ts = self.times[key]
            name, link = unit if unit is not None else (None, None)
            a_key = (thread, state, name)
            attrs = attrs_of.get(a_key)
            if attrs is None:
                attrs = attrs_of[a_key] = self._sample_attributes(d, thread, state, name)
            merged.setdefault((d.stack(stack), attrs, d.link(*link) if link else 0), []).append(ts)
            u = has_unnamed.get(stack.id)
            if u is None:
                u = has_unnamed[stack.id] = any(f.label.startswith(UNKNOWN_ISEQ_PREFIX) for f in stack.frames)
            if u:
                unnamed += len(ts)
        samples = []
        unix = self._unix
        for (stack_index, attrs, link_index), parts in sorted(merged.items()):
            stamps = self._stamps(parts)
            samples.append(message(2, uint(1, stack_index) + packed_varints(2, attrs) + uint(3, link_index)
                                   + repeated_varint(4, period, len(stamps)) + packed_fixed64(5, stamps), keep=True))
        value_type = message(1, uint(1, d.s(typ.name)) + uint(2, d.s(typ.unit)), keep=True)
        start, end = window
        body = (value_type + b"".join(samples) + fixed64(3, unix(start)) + uint(4, max(end - start, 0))
                + message(5, uint(1, d.s("wall")) + uint(2, d.s("nanoseconds")), keep=True) + uint(6, period)
                + packed_varints(11, (d.attribute(UNNAMED_KEY, unnamed),)))
        # a profile's id: its content's (and its process's) digest, so the same profile of the same
        # trace gets the same id however it is rendered (from a file or in memory), never all zeros
        pid = hashlib.sha256(resource + body).digest()[:16]
        return body + message(7, pid if any(pid) else b"\x01" + pid[1:])

    def _sample_attributes(self, d: _Dictionary, thread, state: int, name) -> Tuple[int, ...]:
        attrs = []
        if thread.tid:
            attrs.append(d.attribute(THREAD_ID, thread.tid))
        if thread.name:
            attrs.append(d.attribute(THREAD_NAME, thread.name))
        attrs.append(d.attribute(THREAD_STATE, state_name(state)))
        if name is not None:
            attrs.append(d.attribute(*name))
        return tuple(sorted(attrs))
