from __future__ import annotations

import json
from typing import IO, Dict, Iterable, Iterator

from sdb_trace.output import printable_json

from ..samples import state_name
from .base import Reporter


class JsonReporter(Reporter):
    """JSON Lines, in time order, written as samples arrive. Each distinct stack is defined once, on
    a line of its own before its first sample: {"stack": id, "frames": [[label, path, line], ...]
    root first}; then one line per sample: {"t": seconds since the recording started, "t_ns":
    monotonic ns, "thread": label, "tid", "thread_name", "state", "stack": id}. With --json-frames
    every sample line carries "frames" itself (no stack lines): simpler to read, but a stack is
    written again for each of its samples (on a 10,000-deep recursion, ~34x the collapsed output).
    read_samples() turns either form into samples with their frames. When the recording has several
    sample types (or --sample-type names one), each line also says its "type" (the chosen one's:
    one type a file), and a measured type's line its "value"."""

    name = "json"
    extension = ".jsonl"
    timeline = True
    values = True

    def __init__(self, recording, options):
        super().__init__(recording, options)
        self.inline = bool(getattr(options, "json_frames", False))
        self._threads: Dict[object, str] = {}
        self._stacks: Dict[object, str] = {}
        self._lines = []
        self._pending = 0
        t = self.sample_type
        self._type = f',"type":{json.dumps(t.name)}' if self.names_type or not t.sampled else ""
        self._measured = not t.sampled

    def _stack_ref(self, stack) -> str:
        ref = self._stacks.get(stack)
        if ref is None:
            frames = printable_json(json.dumps([[f.label, f.path, f.line] for f in stack.frames],
                                               separators=(",", ":"), ensure_ascii=False))
            if self.inline:
                ref = f'"frames":{frames}'
            else:
                sid = len(self._stacks)
                ref = f'"stack":{sid}'
                line = f'{{"stack":{sid},"frames":{frames}}}\n'
                self._lines.append(line)
                self._pending += len(line)
            self._stacks[stack] = ref
        return ref

    def add(self, thread, stack, state, t_ns, count, values=None) -> None:
        th = self._threads.get(thread)
        if th is None:
            th = self._threads[thread] = (f'"thread":{json.dumps(thread.label)},"tid":{thread.tid},'
                                          f'"thread_name":{json.dumps(thread.name)}'
                                          + (f',"pid":{thread.process.pid}' if len(self.processes) > 1 else ""))
        ref = self._stack_ref(stack)
        typ = self._type
        if self._measured and values is not None:
            typ += f',"value":{values[self.sample_type.index]}'
        line = (f'{{"t":{(t_ns - self.start_ns) / 1e9:.6f},"t_ns":{t_ns},{th},"state":"{state_name(state)}"{typ},'
                f'{ref}}}\n')
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


def read_samples(lines: Iterable[str]) -> Iterator[dict]:
    """The samples of a json output (either form), each with its "frames": for scripts and tests."""
    stacks: Dict[int, list] = {}
    for line in lines:
        rec = json.loads(line)
        if "t" not in rec:
            stacks[rec["stack"]] = rec["frames"]
            continue
        if "frames" not in rec:
            rec["frames"] = stacks[rec["stack"]]
        yield rec
