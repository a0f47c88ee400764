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
    the root frame. Read by flamegraph.pl, speedscope and inferno."""

    name = "collapsed"
    extension = ".collapsed"

    def __init__(self, header, options):
        super().__init__(header, options)
        self.counts: Counter = Counter()

    def add(self, thread, stack, state, t_ns, count) -> None:
        self.counts[(thread, stack)] += count

    def render(self, out: IO) -> None:
        merged: Counter = Counter()
        for (thread, stack), n in self.counts.items():
            merged[";".join([_clean(thread.label)] + [_clean(f.name) for f in stack.frames])] += n
        lines = sorted(f"{key} {n}" for key, n in merged.items())
        out.write("\n".join(lines) + ("\n" if lines else ""))
