from __future__ import annotations

from collections import Counter
from typing import IO, Tuple

from ..resolve import Frame
from .base import Reporter


def _clean(name: str) -> str:
    return name.replace(";", ",").replace("\n", " ")


class CollapsedReporter(Reporter):
    """`frame;frame;frame count`, root first, one line per distinct stack and thread; the thread is
    the root frame. Read by flamegraph.pl, speedscope and inferno."""

    name = "collapsed"
    extension = ".collapsed"

    def __init__(self, header, options):
        super().__init__(header, options)
        self.counts: Counter = Counter()

    def add(self, thread: str, stack: Tuple[Frame, ...], state: int, t_ns: int, count: int) -> None:
        self.counts[(thread, stack)] += count

    def render(self, out: IO) -> None:
        lines = []
        for (thread, stack), n in self.counts.items():
            lines.append(";".join([_clean(thread)] + [_clean(f.name) for f in stack]) + f" {n}")
        lines.sort()
        out.write("\n".join(lines) + ("\n" if lines else ""))
