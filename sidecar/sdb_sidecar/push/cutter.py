"""The interval cut of a recording's stream: every record a TraceWriter writes (the trace file's, as
it is written; TraceWriter's `tap`) is also handed here as its packed bytes, the sampling side's
only cost (an append). At each cut, the push thread reads what came since the last one into a
MemoryTrace per trace file (rotation starts a new one: its header), whose tables keep every name
seen so far, and the interval's samples beside it: each samples record the sampler encoded is read
in C from its bytes and its samples counted by group as they come (_groups: no Python object a
sample), and the profile library (sdb_symbolize.profile: the one naming path, as sdb-symbolize names
a file's samples) renders the groups (sdb_symbolize.grouped), or the records, decoded, for a pass
the groups cannot serve."""
from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import Callable, Deque, Dict, List, Optional, Tuple

import msgpack

from sdb_trace import MemoryTrace
from sdb_trace.tables import hand_samples

from ._groups import SampleGroups, read_samples

# as the trace's reader decodes a record
UNPACK = dict(raw=False, unicode_errors="replace", strict_map_key=False)
# how the sampler's samples record begins, after its map's first byte: {"t": "samples", ...}
SAMPLES_HEAD = b"\xa1t\xa7samples"


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
    """One trace file's stream: its records decoded as they come into a MemoryTrace (its tables),
    the samples of the current interval kept apart (`batches`, `groups`)."""

    def __init__(self, grid: Optional[Tuple[int, int]] = None):
        self.unpacker = msgpack.Unpacker(**UNPACK)
        self.trace: Optional[MemoryTrace] = None
        self.batches: List[Tuple[int, object]] = []     # (process, the record's bytes or, decoded, it)
        self.groups = SampleGroups()        # the samples of the bytes among them, by group
        self.grouped = True                 # every batch is in groups (none was decoded)
        self.header: dict = {}
        self.ended = False
        self.lo: Optional[int] = None
        self.hi: Optional[int] = None
        self.samples = 0
        self.names = None                   # the stacks named so far (sdb_symbolize's KeptNames)
        self.grid = grid                    # (origin, length) of the intervals, monotonic ns; None: no grid
        self.k: Optional[int] = None        # the grid interval the samples kept now belong to

    def interval_of(self, mono_ns: int) -> Optional[int]:
        return None if self.grid is None else (mono_ns - self.grid[0]) // self.grid[1]

    def interval_over(self, now_ns: int) -> bool:
        """The grid interval of the samples kept now has ended by now_ns (always, without a grid)."""
        return self.k is None or self.grid[0] + (self.k + 1) * self.grid[1] <= now_ns

    def feed(self, data: bytes, close: Callable[["_File"], None]) -> None:
        """Decodes the records in data; before a samples record of a later grid interval than the
        samples kept, close(self) hands those over (a late cut still sends one profile per interval).
        A record of an earlier one (written after its interval was handed over) joins the samples kept."""
        if self.trace is not None and data.startswith(SAMPLES_HEAD, 1):
            batch = read_samples(data)      # None: not as the sampler writes them, decoded below
            if batch is not None:
                self._take(batch.n, batch.lo, batch.hi, close)
                proc = self.trace.count_samples(batch.n)
                self.groups.add(batch, proc)
                self.batches.append((proc, data))
                return
        self.unpacker.feed(data)
        for rec in self.unpacker:
            t = rec.get("t")
            if t == "header":
                self.header = {k: v for k, v in rec.items() if k not in ("t", "magic", "version")}
                self.trace = MemoryTrace(self.header)
                self.names = None
                continue
            if self.trace is None:
                continue                    # no header: nothing can be named (never happens)
            if t == "samples":
                dts = rec["dt_ns"]
                if dts:
                    base = rec["base_ns"]
                    self._take(len(dts), base + min(dts), base + max(dts), close)
                self.batches.append((self.trace.count_samples(len(rec["stack"])), rec))
                self.grouped = False
            else:
                if t == "end":
                    self.ended = True
                self.trace.tables.take(rec, "the sidecar's records")

    def _take(self, n: int, lo: int, hi: int, close: Callable[["_File"], None]) -> None:
        """A samples record of n samples from lo to hi joins the samples kept (after close(self) if
        it is of a later grid interval)."""
        k = self.interval_of(lo)
        if k is not None:
            if self.samples and self.k is not None and k > self.k:
                close(self)
            self.k = k if self.k is None else max(self.k, k)
        self.lo = lo if self.lo is None else min(self.lo, lo)
        self.hi = hi if self.hi is None else max(self.hi, hi)
        self.samples += n

    def sample_groups(self) -> Optional[SampleGroups]:
        """The interval's samples by group (sdb_symbolize.grouped), None if some were decoded."""
        return self.groups if self.grouped else None

    def iter_samples(self, on_batch: Callable[..., None], windows: bool = False, spans: bool = False,
                     proc: Optional[int] = 0, values: bool = False) -> None:
        """The interval's samples batch by batch, as a MemoryTrace that kept them hands them."""
        records: List[dict] = []
        cur = 0
        for p, rec in self.batches:
            if p != cur:
                records.append({"t": "in", "proc": p})
                cur = p
            records.append(rec if isinstance(rec, dict) else msgpack.unpackb(rec, **UNPACK))
        hand_samples(records, on_batch, None, windows, spans, proc, self.trace.tables.typed, values)

    @property
    def tables(self):
        return self.trace.tables

    def _profile(self, fmt: str, options: dict):
        from sdb_symbolize.options import ProfileOptions
        from sdb_symbolize.profile import KeptNames, Profile
        if self.names is None:
            self.names = KeptNames()
        # the names of earlier intervals are kept (only new stacks are named): KeptNames drops
        # whatever a new symbol or pause could change, so each name is the one path's for these tables
        return Profile(self, ProfileOptions(format=fmt, idle=True, **options), self.names)

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
        self.batches = []
        self.groups.clear()
        self.grouped = True
        self.lo = self.hi = None
        self.samples = 0
        if self.k is not None:
            self.k += 1                     # what comes late joins the next interval


class IntervalCutter:
    """Cuts the tapped stream into intervals (`cut`, called by the push thread only). With a grid
    (`origin_ns`, `every_ns`: monotonic ns, the samples' clock), each interval holds the samples of
    one grid interval, however late the cut that hands it over."""

    def __init__(self, tap: StreamTap, origin_ns: Optional[int] = None, every_ns: Optional[int] = None):
        self.tap = tap
        self.files: Dict[int, _File] = {}
        self.grid = (origin_ns, every_ns) if origin_ns is not None and every_ns else None

    def cut(self, on_interval: Callable[[Interval], None], now_ns: Optional[int] = None) -> int:
        """Reads what was written since the last cut and calls on_interval with each trace file's
        samples (rotation: a cut may see two files), one call per grid interval they fall in; the
        last one only if its grid interval is over by now_ns (None: the recording is over, all).
        Returns the samples handed over."""
        handed = 0

        def hand(f: _File) -> None:
            nonlocal handed
            period = int(1e9 / f.header["rate_hz"]) if f.header.get("rate_hz") else 0
            try:
                on_interval(Interval(f.samples, f.wall_ns(f.lo), f.wall_ns(f.hi) + period, f.header,
                                     f.render, f.collect))
            finally:
                handed += f.samples
                f.next_interval()

        for writer, data in self.tap.take():
            f = self.files.get(writer)
            if f is None:
                f = self.files[writer] = _File(self.grid)
            f.feed(data, hand)
        for writer, f in list(self.files.items()):
            if f.trace is not None and f.samples and (now_ns is None or f.ended or f.interval_over(now_ns)):
                hand(f)
            if f.ended:
                del self.files[writer]
        return handed
