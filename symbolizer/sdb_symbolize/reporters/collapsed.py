from __future__ import annotations

from collections import Counter
from typing import IO

from sdb_trace.output import printable

from .base import Reporter


def _clean(name: str) -> str:
    """A frame as the format allows it: `;` separates frames (so it becomes `,`), and control
    characters (line breaks, escape sequences: names the profiled program chose) become visible
    escapes such as `\\x1b` (sdb_trace.output.printable)."""
    return printable(name.replace(";", ","))


class CollapsedReporter(Reporter):
    """`frame;frame;frame count`, root first, one line per distinct stack and thread; the thread is
    the root frame (under its process in a trace of several). Read by flamegraph.pl, speedscope and
    inferno."""

    name = "collapsed"
    extension = ".collapsed"

    def __init__(self, recording, options):
        super().__init__(recording, options)
        self.counts: Counter = Counter()

    def add(self, thread, stack, state, t_ns, count) -> None:
        self.counts[(thread, stack)] += count

    def render(self, out: IO) -> None:
        # merged by thread label and interned stack (no line is built twice), sorted by thread and
        # frame names, written one line at a time: deep stacks never sit in memory as text all at once
        merged: Counter = Counter()
        for (thread, stack), n in self.counts.items():
            merged[(";".join(_clean(r) for r in thread.roots), stack)] += n
        names: dict = {}

        def name(f):
            s = names.get(f)
            if s is None:
                s = names[f] = _clean(f.name)
            return s

        rows = [(label, [name(f) for f in stack.frames], n) for (label, stack), n in merged.items()]
        rows.sort(key=lambda r: (r[0], r[1]))
        for label, frames, n in rows:
            out.write(";".join([label] + frames) + f" {n}\n")
