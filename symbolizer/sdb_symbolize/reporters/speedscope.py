from __future__ import annotations

import json
from typing import IO, Dict, List

from sdb_trace import PROC_SHIFT

from .. import __version__
from ..samples import NO_UNIT, endpoint_name, unit_label
from .base import Reporter
from .columns import Column


class _Profile:
    """One thread's samples (or one group's: --by) in time order; runs of the same stack are merged
    (weights add up). The run being merged is held in last_sid/last_w until the stack changes."""
    __slots__ = ("thread", "unit", "type", "stacks", "weights", "first_ns", "last_ns", "last_sid", "last_w", "total")

    def __init__(self, thread, unit=None, type=None):
        self.thread = thread
        self.unit = unit
        self.type = type
        self.stacks = Column("l")
        self.weights = Column("q")
        self.first_ns = None
        self.last_ns = None
        self.last_sid = -1
        self.last_w = 0
        self.total = 0

    def add(self, sid: int, w: int) -> None:
        self.total += w
        if sid == self.last_sid:
            self.last_w += w
            return
        self.flush()
        self.last_sid, self.last_w = sid, w

    def flush(self) -> None:
        if self.last_sid >= 0:
            self.stacks.append(self.last_sid)
            self.weights.append(self.last_w)
            self.last_sid, self.last_w = -1, 0


class SpeedscopeReporter(Reporter):
    """speedscope's own JSON format (https://www.speedscope.app/file-format-schema.json): one
    "sampled" profile per thread, samples in time order weighted in nanoseconds (each sample
    weighs one tick period), frames with their file and line. With --by endpoint, one profile per
    endpoint instead (its requests' samples, every thread's, in time order; the largest first);
    with --by request, one per request or job (in the order they began), named with its endpoint,
    id, duration and thread. Samples outside any come last, as `(no request or job)`.
    Sample types: the profiles above for each of the recording's types (wall, then cpu: the running
    samples only; a measured type weighted by its values), each profile's name ending in `[type]`
    when there are several; --sample-type: that type's only."""

    name = "speedscope"
    extension = ".speedscope.json"
    timeline = True
    values = all_types = True
    UNITS = {"nanoseconds": "nanoseconds", "microseconds": "microseconds", "milliseconds": "milliseconds",
             "seconds": "seconds", "bytes": "bytes"}      # speedscope's; any other: "none"

    def __init__(self, recording, options):
        super().__init__(recording, options)
        self.by = getattr(options, "by", None)
        if self.by:
            self.by_unit = True          # samples come with their unit (add_unit) ...
            self.groups_units = True     # ... and without the root frame other formats get
        self.profiles: Dict[object, _Profile] = {}
        self.frame_ids: Dict[object, int] = {}
        self.frames: List[dict] = []
        self.stack_frames: Dict[int, List[int]] = {}   # Stack.id -> frame indexes, root first
        asked = getattr(options, "sample_type", None)
        self.shown = [t for t in self.sample_types if asked is None or t is self.sample_type]
        self.suffix = len(self.shown) > 1

    def _stack(self, stack) -> int:
        if stack.id not in self.stack_frames:
            ids = []
            for f in stack.frames:
                i = self.frame_ids.get(f)
                if i is None:
                    i = self.frame_ids[f] = len(self.frames)
                    d = {"name": f.label}
                    if f.path:
                        d["file"] = f.path
                        if f.line:
                            d["line"] = f.line
                    self.frames.append(d)
                ids.append(i)
            self.stack_frames[stack.id] = ids
        return stack.id

    def _weights(self, count, values):
        """(type, weight) of a sample for each shown type it is of."""
        if values is None:          # a caller that knows no types: the first's
            return ((self.sample_types[0], self.period_ns * count),)
        return tuple((t, values[t.index]) for t in self.shown if values[t.index] is not None)

    def _into(self, key, thread, unit, typ, t_ns, stack, w) -> None:
        p = self.profiles.get((typ.index, key))
        if p is None:
            p = self.profiles[(typ.index, key)] = _Profile(thread, unit, typ)
            p.first_ns = t_ns
        p.last_ns = t_ns
        p.add(self._stack(stack), w)

    def add_unit(self, thread, stack, state, t_ns, count, unit, values=None) -> None:
        if unit is None:
            key = NO_UNIT
        else:
            key = endpoint_name(unit) if self.by == "endpoint" else unit["span"]
        for typ, w in self._weights(count, values):
            self._into(key, thread, unit, typ, t_ns, stack, w)

    def _profile_name(self, p: _Profile) -> str:
        name = self._unit_name(p)
        return f"{name} [{p.type.name}]" if self.suffix else name

    def _unit_name(self, p: _Profile) -> str:
        if not self.by:
            return " / ".join(p.thread.roots)
        if p.unit is None:
            return NO_UNIT
        if self.by == "endpoint":
            return endpoint_name(p.unit)
        u = p.unit
        took = f"{(u['end_ns'] - u['begin_ns']) / 1e6:.1f} ms" if u["begin_ns"] is not None and \
            u["end_ns"] is not None else "not ended in the recording" if u["end_ns"] is None else "began before"
        return f"{unit_label(u)} ({took}, {p.thread.label})"

    def _order(self) -> List[_Profile]:
        ps = list(self.profiles.values())
        if not self.by:
            return sorted(ps, key=lambda p: (p.type.index, p.thread.serial >> PROC_SHIFT, not p.thread.main,
                                             p.thread.serial))
        if self.by == "endpoint":
            return sorted(ps, key=lambda p: (p.type.index, p.unit is None, -p.total, endpoint_name(p.unit)))
        return sorted(ps, key=lambda p: (p.type.index, p.unit is None, (p.unit["begin_ns"] or 0) if p.unit else 0,
                                         p.unit["span"] if p.unit else 0))

    def add(self, thread, stack, state, t_ns, count, values=None) -> None:
        for typ, w in self._weights(count, values):
            self._into(thread, thread, None, typ, t_ns, stack, w)

    def render(self, out: IO) -> None:
        h = self.header
        profiles = self._order()
        out.write('{"$schema":"https://www.speedscope.app/file-format-schema.json",')
        title = f"sdb: pid {h.get('pid')} {' '.join(h.get('command') or [])}".strip()
        out.write(f'"name":{json.dumps(title)},')
        out.write(f'"exporter":"sdb {__version__}","activeProfileIndex":0,')
        out.write('"shared":{"frames":' + json.dumps(self.frames, separators=(",", ":")) + '},"profiles":[')
        for n, p in enumerate(profiles):
            p.flush()
            out.write(("," if n else "") + '{"type":"sampled","name":' + json.dumps(self._profile_name(p))
                      + f',"unit":"{self.UNITS.get(p.type.unit, "none")}","startValue":0,"endValue":{p.total},"samples":[')
            cache: Dict[int, str] = {}

            def stack_text(sid: int) -> str:
                s = cache.get(sid)
                if s is None:
                    s = cache[sid] = "[" + ",".join(map(str, self.stack_frames[sid])) + "]"
                return s
            p.stacks.write(out, stack_text)
            out.write('],"weights":[')
            p.weights.write(out)
            out.write("]}")
            p.stacks.close()
            p.weights.close()
        out.write("]}\n")
