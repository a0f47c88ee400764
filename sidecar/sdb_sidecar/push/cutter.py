"""The interval cut of a recording's stream: every record a TraceWriter writes (the trace file's, as
it is written; TraceWriter's `tap`) is also handed here as its packed bytes, the sampling side's
only cost (an append). At each cut, the push thread reads what came since the last one into a
MemoryTrace per trace file (rotation starts a new one: its header), whose tables keep every name
seen so far and whose samples are the interval's, and renders them through the profile library
(sdb_symbolize.profile: the one naming path, as sdb-symbolize names a file's samples)."""
from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import Callable, Deque, Dict, List, Optional, Tuple

import msgpack

from sdb_trace import MemoryTrace


class StreamTap:
    """The records of every TraceWriter of one recording, in the order each wrote them, tagged with
    the writer (`for_writer()`, one per trace file) until `take()`."""

    def __init__(self):
        self._records: Deque[Tuple[int, bytes]] = deque()
        self._next = 0
        self._lock = threading.Lock()

    def for_writer(self) -> Callable[[bytes], None]:
        """The tap of one new TraceWriter (its constructor's `tap=`)."""
        with self._lock:
            writer = self._next
            self._next += 1
        append = self._records.append

        def tap(data) -> None:
            append((writer, data if type(data) is bytes else bytes(data)))
        return tap

    def take(self) -> List[Tuple[int, bytes]]:
        """What was written since the last take (deque appends and pops are atomic)."""
        out = []
        pop = self._records.popleft
        for _ in range(len(self._records)):
            out.append(pop())
        return out


@dataclass
class Interval:
    """The samples of one trace file written between two cuts: their count, their first and last
    moments (wall clock, ns) and the recording's header; `render(fmt, **options)` gives their
    profile (sdb_symbolize's formats: "pprof", "otlp"...; more ProfileOptions fields as keywords), as
    sdb-symbolize would make it of these samples (blocked threads' too)."""
    samples: int
    start_wall_ns: int
    end_wall_ns: int                # the last sample's moment plus one tick period
    header: dict
    render: Callable[..., bytes]
    collect: Callable[..., object]  # (fmt, **options) -> the format's reporter after the sample pass, unrendered


class _File:
    """One trace file's stream: its records decoded as they come, into a MemoryTrace that keeps the
    samples of the current interval only."""

    def __init__(self):
        self.unpacker = msgpack.Unpacker(raw=False, unicode_errors="replace", strict_map_key=False)
        self.trace: Optional[MemoryTrace] = None
        self.header: dict = {}
        self.ended = False
        self.lo: Optional[int] = None
        self.hi: Optional[int] = None
        self.samples = 0
        self.names = None                   # the stacks named so far (sdb_symbolize's KeptNames)

    def feed(self, data: bytes) -> None:
        self.unpacker.feed(data)
        for rec in self.unpacker:
            t = rec.get("t")
            if t == "header":
                self.header = {k: v for k, v in rec.items() if k not in ("t", "magic", "version")}
                self.trace = MemoryTrace(self.header, keep_samples=True)
                self.names = None
                continue
            if self.trace is None:
                continue                    # no header: nothing can be named (never happens)
            if t == "samples":
                dts = rec["dt_ns"]
                if dts:
                    base = rec["base_ns"]
                    lo, hi = base + min(dts), base + max(dts)
                    self.lo = lo if self.lo is None else min(self.lo, lo)
                    self.hi = hi if self.hi is None else max(self.hi, hi)
                    self.samples += len(dts)
                self.trace._write(rec)
            else:
                if t == "end":
                    self.ended = True
                self.trace.tables.take(rec, "the sidecar's records")

    def _profile(self, fmt: str, options: dict):
        from sdb_symbolize.options import ProfileOptions
        from sdb_symbolize.profile import KeptNames, Profile
        if self.names is None:
            self.names = KeptNames()
        # the names of earlier intervals are kept (only new stacks are named): KeptNames drops
        # whatever a new symbol or pause could change, so each name is the one path's for these tables
        return Profile(self.trace, ProfileOptions(format=fmt, idle=True, **options), self.names)

    def render(self, fmt: str, **options) -> bytes:
        from io import BytesIO
        out = BytesIO()
        self._profile(fmt, options).render(out)
        return out.getvalue()

    def collect(self, fmt: str, **options):
        return self._profile(fmt, options).collect()

    def wall_ns(self, mono_ns: int) -> int:
        h = self.header
        return h.get("start_wall_ns", 0) + (mono_ns - h.get("start_mono_ns", 0))

    def next_interval(self) -> None:
        """The interval's samples are done with: the names stay, the samples go."""
        self.trace.kept = []
        self.trace._kept_proc = 0
        self.lo = self.hi = None
        self.samples = 0


class IntervalCutter:
    """Cuts the tapped stream into intervals (`cut`, called by the push thread only)."""

    def __init__(self, tap: StreamTap):
        self.tap = tap
        self.files: Dict[int, _File] = {}

    def cut(self, on_interval: Callable[[Interval], None]) -> int:
        """Reads what was written since the last cut and calls on_interval with each trace file's
        samples (rotation: a cut may see two files). Returns the samples handed over."""
        for writer, data in self.tap.take():
            f = self.files.get(writer)
            if f is None:
                f = self.files[writer] = _File()
            f.feed(data)
        handed = 0
        for writer, f in list(self.files.items()):
            if f.trace is not None and f.samples:
                period = int(1e9 / f.header["rate_hz"]) if f.header.get("rate_hz") else 0
                try:
                    on_interval(Interval(f.samples, f.wall_ns(f.lo), f.wall_ns(f.hi) + period, f.header,
                                         f.render, f.collect))
                finally:
                    handed += f.samples
                    f.next_interval()
            if f.ended:
                del self.files[writer]
        return handed
