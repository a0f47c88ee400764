"""What reporters see of a recording besides its samples' counts: its processes and threads, its
named stacks (interned), its units of work (requests, jobs) as they are named in outputs, and the
progress line of a long pass."""
from __future__ import annotations

import sys
import time
from array import array
from typing import Dict, List, Optional, Tuple

from sdb_trace import STATE_NAMES, STATE_UNKNOWN, Tables

from .resolve import Frame, thread_label


class Process:
    """A recorded process as reporters see it (one object per process of the trace)."""
    __slots__ = ("proc", "pid", "ppid", "command", "label", "start_ns", "end_ns", "end_reason")

    TITLE_MAX = 80

    def __init__(self, tables: Tables):
        p = tables.process or {}
        end = tables.process_end or {}
        self.proc = tables.proc
        self.pid = tables.pid
        self.ppid = p.get("ppid")
        self.command = tables.command
        title = " ".join(self.command)
        if len(title) > self.TITLE_MAX:
            title = title[:self.TITLE_MAX - 3] + "..."
        self.label = f"process {self.pid} ({title})" if title else f"process {self.pid}"
        self.start_ns = p.get("at_ns")
        self.end_ns = end.get("at_ns")
        self.end_reason = end.get("reason")


class Thread:
    """A recorded thread as reporters see it (one object per thread). `serial` is its id in the
    trace (a thread of process p other than 0: p << PROC_SHIFT | its serial there); `roots`, the
    frames above its stack in a profile: its label, under its process's when the trace has several
    processes and they are not merged."""
    __slots__ = ("serial", "tid", "name", "label", "main", "start_ns", "end_ns", "process", "roots")

    def __init__(self, serial: int, rec: Optional[dict], process: Optional[Process] = None, split: bool = False):
        rec = rec or {}
        self.serial = serial
        self.process = process
        self.tid = rec.get("tid", 0)
        self.main = bool(rec.get("flags", 0) & 1)
        self.name = rec.get("name") or ("main" if self.main else "")
        self.label = thread_label(rec or None, serial)
        self.start_ns = rec.get("start_ns")
        self.end_ns = rec.get("end_ns")
        self.roots = (process.label, self.label) if split and process is not None else (self.label,)


class Stack:
    """A named stack, interned: equal stacks are the same object (hash by identity, cheap).
    `frames` is root first; `id` is small and dense (0, 1, 2... in order of first use)."""
    __slots__ = ("id", "frames")

    def __init__(self, id: int, frames: Tuple[Frame, ...]):
        self.id = id
        self.frames = frames


class CompactStack(Stack):
    """A named stack kept as the numbers of its frames in a table of the pass's frames (2 bytes a
    frame while the table holds at most 65,536, else 4), for reporters that read each stack's
    frames once (flamegraph, firefox): `frames` is made anew on each read. A 10,000-deep stack
    costs 20 KB this way, 80 KB as a tuple (issue 44)."""
    __slots__ = ("code", "data", "table")

    def __init__(self, id: int, code: str, data: bytes, table: List[Frame]):
        self.id = id
        self.code = code
        self.data = data
        self.table = table

    @property
    def frames(self) -> Tuple[Frame, ...]:
        return tuple(map(self.table.__getitem__, memoryview(self.data).cast(self.code)))


class CompactStacks:
    """The CompactStacks of one sample pass: its table of frames, numbered by equality (as tuples
    compare: equal stacks get equal numbers), and each stack by the bytes of its numbers."""

    def __init__(self):
        self.table: List[Frame] = []
        self.number: Dict[Frame, int] = {}
        self.by_data: Dict[str, Dict[bytes, CompactStack]] = {"H": {}, "I": {}}

    def intern(self, frames: Tuple[Frame, ...], first_id: int) -> CompactStack:
        """The CompactStack of these frames (ids go on from first_id, the pass's other stacks)."""
        table, number = self.table, self.number
        local = {}
        for i, f in dict(zip(map(id, frames), frames)).items():    # the stack's distinct Frames
            n = number.get(f)
            if n is None:
                n = number[f] = len(table)
                table.append(f)
            local[i] = n
        code = "H" if max(local.values(), default=0) < 1 << 16 else "I"    # by the numbers: equal stacks alike
        data = array(code, map(local.__getitem__, map(id, frames))).tobytes()
        by_data = self.by_data[code]
        s = by_data.get(data)
        if s is None:
            s = by_data[data] = CompactStack(first_id + len(self.by_data["H"]) + len(self.by_data["I"]), code,
                                             data, table)
        return s


_FUNCTION_FRAMES: Dict[Frame, Frame] = {}


def function_frame(f: Frame) -> Frame:
    """The frame without its line (--no-lines): one per function and file (interned)."""
    g = _FUNCTION_FRAMES.get(f)
    if g is None:
        g = Frame(f.label, f.path, 0)
        g.name = f"{f.label} ({f.path})" if f.path else f.label
        g = _FUNCTION_FRAMES.setdefault(g, g)
        _FUNCTION_FRAMES[f] = g
    return g


class Progress:
    """One line on stderr while a long pass runs: looks at the clock only every `every` calls,
    redraws at most 10 times a second, and erases itself at the end. Silent unless stderr is a
    terminal, and for the first half second (short runs never show it)."""

    def __init__(self, total: int, stream=None, every: int = 8, delay_s: float = 0.5):
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = bool(getattr(self.stream, "isatty", lambda: False)())
        self.total = max(total, 1)
        self.done = 0
        self.every = every
        self._calls = 0
        self._start = time.monotonic()
        self._next_draw = self._start + delay_s
        self._drawn = False

    def update(self, n: int) -> None:
        self.done += n
        self._calls += 1
        if not self.enabled or self._calls % self.every:
            return
        now = time.monotonic()
        if now < self._next_draw:
            return
        self._next_draw = now + 0.1
        rate = self.done / max(now - self._start, 1e-9)
        self.stream.write(f"\r\x1b[Ksdb-symbolize: {100.0 * self.done / self.total:5.1f}% "
                          f"({self.done:,} of {self.total:,} samples, {rate:,.0f}/s)")
        self.stream.flush()
        self._drawn = True

    def finish(self) -> None:
        if self._drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._drawn = False


NO_UNIT = "(no request or job)"
_ENDPOINT_FRAMES: Dict[str, Frame] = {}


def endpoint_name(u: Optional[dict]) -> str:
    """What a unit of work is called in outputs: its endpoint; `(no endpoint)` for one the app
    never named (a request still running when the recording ended, before Rails named it)."""
    if u is None:
        return NO_UNIT
    return u["endpoint"] if u["endpoint"] is not None else "(no endpoint)"


def endpoint_frame(u: Optional[dict]) -> Frame:
    name = endpoint_name(u)
    f = _ENDPOINT_FRAMES.get(name)
    if f is None:
        f = _ENDPOINT_FRAMES[name] = Frame(f"[{name}]" if u is not None else name, None, 0)
    return f


_REQUEST_FRAMES: Dict[str, Frame] = {}


def unit_label(u: Optional[dict]) -> str:
    """One unit of work, told apart from the others of its endpoint: `ReportsController#show
    4f1c...` (its request id or jid), or `... span 17` when the app gave it none."""
    if u is None:
        return NO_UNIT
    rid = u["request_id"]
    return f"{endpoint_name(u)} {rid}" if rid else f"{endpoint_name(u)} span {u['span']}"


def request_frame(u: Optional[dict]) -> Frame:
    if u is None:
        return endpoint_frame(None)
    name = unit_label(u)
    f = _REQUEST_FRAMES.get(name)
    if f is None:
        f = _REQUEST_FRAMES[name] = Frame(f"[{name}]", None, 0)
    return f


def state_name(state: int) -> str:
    return STATE_NAMES.get(state, STATE_NAMES[STATE_UNKNOWN])
