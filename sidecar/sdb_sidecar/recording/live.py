"""What `top` shows: samples from the recorder's own Sampler and Drainer, named as sdb-symbolize names
them, counted over a moving window, and laid out as lines of text (the screen code only draws them).

No trace file is written: `LiveProfile` is an sdb_trace.MemoryTrace, whose records go into the same
tables the symbolizer builds from a file, named by the same Resolver.
"""
from __future__ import annotations

import os
from collections import Counter, deque
from dataclasses import dataclass
from typing import Deque, Dict, List, Tuple


from sdb_symbolize.resolve import Resolver
import sdb_trace
from sdb_trace.output import printable
from sdb_trace import STATE_BLOCKED, STATE_GVL_WAIT, STATE_RUNNING, MemoryTrace


BUCKET_NS = 250_000_000      # samples are counted in quarter-second buckets
SORT_COLUMNS = ("%Own", "%Total", "OwnTime", "TotalTime")


class LiveProfile(MemoryTrace):
    """The Drainer's writer for `top`: keeps the tables and the last `window_s` seconds of samples."""

    def __init__(self, header: dict, window_s: float):
        self.window_ns = int(window_s * 1e9)
        self.buckets: Deque[Tuple[int, Counter]] = deque()   # (bucket index, (serial, stack, state) -> n)
        self.last_state: Dict[int, int] = {}                 # serial -> state of its latest sample
        self.live: Dict[int, dict] = {}                      # serial -> thread record, while alive
        self._keys: Dict[Tuple[int, bool], tuple] = {}
        super().__init__(header)
        self.resolver = Resolver(self.tables)

    # ------------------------------------------------------------ records in (MemoryTrace)
    def _write(self, rec: dict) -> None:
        t = rec["t"]
        if t in sdb_trace.SYMBOL_RECORDS:
            table, addr, _ = self.tables.symbol_of(rec)
            if table.get(addr):
                # a reused (or moved) address: the view shows what runs now, so the new name wins
                # (and a long session keeps one name an address)
                table[addr].clear()
                self.resolver = Resolver(self.tables)
                self._keys.clear()
        super()._write(rec)
        if t == "thread":
            self.live[rec["serial"]] = rec
        elif t == "thread_end":
            self.live.pop(rec["serial"], None)
            self.last_state.pop(rec["serial"], None)

    def on_samples(self, rec: dict) -> None:
        base = rec["base_ns"]
        counts = None
        current = -1
        for dt, serial, sid, state in zip(rec["dt_ns"], rec["thread"], rec["stack"], rec["state"]):
            b = (base + dt) // BUCKET_NS
            if b != current:
                current = b
                if not self.buckets or self.buckets[-1][0] < b:
                    self.buckets.append((b, Counter()))
                counts = self.buckets[-1][1]
            counts[(serial, sid, state)] += 1
            self.last_state[serial] = state

    # ------------------------------------------------------------ the window
    def expire(self, now_ns: int) -> None:
        first = (now_ns - self.window_ns) // BUCKET_NS
        while self.buckets and self.buckets[0][0] < first:
            self.buckets.popleft()

    def keys(self, sid: int, lines: bool, t_ns: int) -> tuple:
        """(own key, total keys) of a stack: function = (label, path), line = (label, path, line)."""
        cached = self._keys.get((sid, lines))
        if cached is None:
            frames = self.resolver.stack(sid, t_ns)
            keys = [(f.label, f.path, f.line) if lines else (f.label, f.path, None) for f in frames]
            if not keys:
                keys = [("(no Ruby frames)", None, None)]
            cached = self._keys[(sid, lines)] = (keys[-1], frozenset(keys))
        return cached

    def view(self, now_ns: int, lines: bool, idle: bool) -> "View":
        self.expire(now_ns)
        window: Counter = Counter()
        for _, c in self.buckets:
            window.update(c)
        own: Counter = Counter()
        total: Counter = Counter()
        shown = 0
        for (serial, sid, state), n in window.items():
            if state == STATE_BLOCKED and not idle:
                continue
            shown += n
            o, ts = self.keys(sid, lines, now_ns)
            own[o] += n
            for k in ts:
                total[k] += n
        states = Counter(self.last_state.get(s, 0) for s in self.live)
        return View(rows=[Row(k, own[k], total[k]) for k in total], samples=shown,
                    threads=len(self.live), running=states[STATE_RUNNING], gvl_wait=states[STATE_GVL_WAIT],
                    blocked=states[STATE_BLOCKED], unknown=len(self.live) - states[STATE_RUNNING]
                    - states[STATE_GVL_WAIT] - states[STATE_BLOCKED])


@dataclass
class Row:
    key: tuple           # (label, path, line or None)
    own: int
    total: int


@dataclass
class View:
    rows: List[Row]
    samples: int
    threads: int
    running: int
    gvl_wait: int
    blocked: int
    unknown: int


def merge_views(views: List[View]) -> View:
    """One view of several processes' (a process tree): rows of the same function or line added up."""
    if len(views) == 1:
        return views[0]
    rows: Dict[tuple, Row] = {}
    for v in views:
        for r in v.rows:
            have = rows.get(r.key)
            if have is None:
                rows[r.key] = Row(r.key, r.own, r.total)
            else:
                have.own += r.own
                have.total += r.total
    return View(rows=list(rows.values()), samples=sum(v.samples for v in views),
                threads=sum(v.threads for v in views), running=sum(v.running for v in views),
                gvl_wait=sum(v.gvl_wait for v in views), blocked=sum(v.blocked for v in views),
                unknown=sum(v.unknown for v in views))


@dataclass
class Settings:
    sort: int = 0          # index into SORT_COLUMNS
    lines: bool = False
    idle: bool = False
    paused: bool = False


def sort_rows(rows: List[Row], sort: int) -> List[Row]:
    if sort in (0, 2):
        return sorted(rows, key=lambda r: (-r.own, -r.total, r.key[0]))
    return sorted(rows, key=lambda r: (-r.total, -r.own, r.key[0]))


def where(key: tuple) -> str:
    """A row's text: names the target chose, with control characters made visible (printable)."""
    label, path, line = key
    if not path:
        return printable(label)
    return printable(f"{label} ({path}:{line})" if line else f"{label} ({path})")   # 0, None: no line


def shorten(text: str, width: int) -> str:
    """Fits `text` in `width` columns, cutting the middle of long paths ("label (...tail)")."""
    if len(text) <= width:
        return text
    if width < 8:
        return text[:width]
    return text[:width // 3] + "..." + text[len(text) - (width - width // 3 - 3):]


def screen_lines(info: dict, view: View, st: Settings, width: int, height: int) -> List[str]:
    """The whole screen as lines, each at most `width` long; the first table line is lines[TABLE_HEAD]."""
    period = 1.0 / info["rate_hz"]
    state = "  [paused]" if st.paused else ""
    if info.get("exited"):
        state = "  [exited]"
    procs = info.get("processes", 1)
    head = [
        f"sdb top: pid {info['pid']}  {info['command']}" + (f"  (+{procs - 1} child processes)" if procs > 1 else ""),
        f"Ruby {info['ruby']}   sampling {info['rate_hz']:g} Hz (achieved {info['achieved_hz']:.0f})   "
        f"window {info['window_s']:g} s   samples {view.samples}{state}",
        f"Threads: {view.threads}   running {view.running}, waiting for GVL {view.gvl_wait}, "
        f"blocked {view.blocked}" + (f", not sampled yet {view.unknown}" if view.unknown else ""),
        f"Showing {'lines' if st.lines else 'functions'}, sorted by {SORT_COLUMNS[st.sort]}, "
        f"idle {'shown' if st.idle else 'hidden'}",
        "",
    ]
    cols = [f"{c}{'*' if i == st.sort else ' '}" for i, c in enumerate(SORT_COLUMNS)]
    table_head = f"{cols[0]:>7} {cols[1]:>8} {cols[2]:>9} {cols[3]:>10}  {'Line' if st.lines else 'Function'}"
    out = [h[:width] for h in head] + [table_head[:width]]
    room = max(0, height - len(out) - 1)
    n = max(view.samples, 1)
    for r in sort_rows(view.rows, st.sort)[:room]:
        left = (f"{100.0 * r.own / n:6.1f}% {100.0 * r.total / n:7.1f}% {r.own * period:8.2f}s "
                f"{r.total * period:9.2f}s  ")
        out.append(left + shorten(where(r.key), max(0, width - len(left))))
    while len(out) < height - 1:
        out.append("")
    out.append("keys: 1-4 sort by column (o own, t total)  l lines/functions  i idle  space pause  q quit"[:width])
    return out[:height]


TABLE_HEAD = 5


def command_text(command: List[str]) -> str:
    return printable(" ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(command))) or "?"
