from __future__ import annotations

import json
from typing import IO, Dict

from sdb_trace.output import printable_json

from ..samples import state_name
from .base import Reporter


class JsonReporter(Reporter):
    """One JSON object per sample per line (JSON Lines), in time order, written as samples arrive:
    {"t": seconds since the recording started, "t_ns": monotonic ns, "thread": label, "tid",
    "thread_name", "state", "frames": [[label, path, line], ...] root first}."""

    name = "json"
    extension = ".jsonl"
    timeline = True

    def __init__(self, header, options):
        super().__init__(header, options)
        self.start_ns = header.get("start_mono_ns", 0)
        self._threads: Dict[object, str] = {}
        self._stacks: Dict[object, str] = {}
        self._lines = []
        self._pending = 0

    def add(self, thread, stack, state, t_ns, count) -> None:
        th = self._threads.get(thread)
        if th is None:
            th = self._threads[thread] = (f'"thread":{json.dumps(thread.label)},"tid":{thread.tid},'
                                          f'"thread_name":{json.dumps(thread.name)}')
        frames = self._stacks.get(stack)
        if frames is None:
            frames = self._stacks[stack] = printable_json(json.dumps([[f.label, f.path, f.line] for f in stack.frames],
                                                                     separators=(",", ":"), ensure_ascii=False))
        line = (f'{{"t":{(t_ns - self.start_ns) / 1e9:.6f},"t_ns":{t_ns},{th},"state":"{state_name(state)}",'
                f'"frames":{frames}}}\n')
        for _ in range(count):
            self._lines.append(line)
        self._pending += len(line) * count
        if self._pending >= 1 << 20:        # at most ~1 MiB held (lines of deep stacks are long)
            self.out.write("".join(self._lines))
            self._lines.clear()
            self._pending = 0

    def render(self, out: IO) -> None:
        out.write("".join(self._lines))
        self._lines.clear()
