from __future__ import annotations

from collections import Counter
from typing import IO

from sdb_trace.output import printable

from .base import Reporter

TOP = 30


class CompareSlowReporter(Reporter):
    """`--compare-slow`: the requests or jobs of the chosen endpoints split at `--slower-than` into
    slow and fast ones, side by side: for each function, its share of the slow ones' samples and of
    the fast ones' (self: innermost frame; total: anywhere on the stack), largest difference first.
    What the slow requests do that the fast ones do not is at the top. Not a --format: chosen by the
    option, with --endpoint and --slower-than."""

    name = "compare-slow"
    extension = ".compare.txt"
    by_unit = True

    def __init__(self, recording, options):
        super().__init__(recording, options)
        self.threshold_ns = (options.slower_than_ms or 0) * 1e6
        self.own = {True: Counter(), False: Counter()}
        self.total = {True: Counter(), False: Counter()}
        self.samples = Counter()
        self.units = {True: set(), False: set()}

    def add(self, thread, stack, state, t_ns, count) -> None:
        pass                        # outside any request or job: not compared

    def add_unit(self, thread, stack, state, t_ns, count, unit) -> None:
        if unit is None or unit["begin_ns"] is None or unit["end_ns"] is None:
            return                  # unfinished: neither slow nor fast yet
        slow = unit["end_ns"] - unit["begin_ns"] >= self.threshold_ns
        self.units[slow].add(unit["span"])
        self.samples[slow] += count
        if not stack.frames:
            return
        self.own[slow][stack.frames[-1].label] += count
        for label in {f.label for f in stack.frames}:
            self.total[slow][label] += count

    def render(self, out: IO) -> None:
        ms = self.threshold_ns / 1e6
        out.write(f"sdb compare-slow: {len(self.units[True]):,} requests/jobs of {ms:g} ms or more "
                  f"({self.samples[True]:,} samples) beside {len(self.units[False]):,} faster ones "
                  f"({self.samples[False]:,} samples); shares of each side's samples\n")
        if not self.samples[True] or not self.samples[False]:
            side = "slow" if not self.samples[True] else "fast"
            out.write(f"nothing to compare: no samples of {side} requests or jobs\n")
            return

        def share(c: Counter, slow: bool, label: str) -> float:
            return 100.0 * c[slow][label] / self.samples[slow]

        for title, c in (("SELF (innermost frame)", self.own), ("TOTAL (anywhere on the stack)", self.total)):
            labels = set(c[True]) | set(c[False])
            rows = sorted(labels, key=lambda lb: (-(share(c, True, lb) - share(c, False, lb)), lb))[:TOP]
            out.write(f"\n{'SLOW %':>8} {'FAST %':>8} {'DIFF':>8}  {title}\n")
            for lb in rows:
                s, f = share(c, True, lb), share(c, False, lb)
                out.write(f"{s:>7.1f}% {f:>7.1f}% {s - f:>+7.1f}  {printable(lb)}\n")
