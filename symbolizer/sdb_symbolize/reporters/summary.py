from __future__ import annotations

from collections import Counter
from typing import IO, Dict, Tuple

from sdb_trace.output import printable

from .base import Reporter


class SummaryReporter(Reporter):
    """A text table like stackprof's: for each function, the samples in which it runs (self) and
    in which it is anywhere on the stack (total, counted once per sample however deep the
    recursion), with their share of all samples; most self time first."""

    name = "summary"
    extension = ".summary.txt"
    what = "FUNCTION"

    def __init__(self, recording, options):
        super().__init__(recording, options)
        self.by_stack: Counter = Counter()
        self.threads = set()

    def key(self, frame) -> Tuple:
        # a C function (or a built-in Ruby method shown as one) is located at its caller: one row
        # for it, not one per calling file
        return (frame.label, "" if frame.located_at_caller else frame.path or "")

    def describe(self, key: Tuple) -> str:
        return f"{key[0]} ({key[1]})" if key[1] else key[0]

    def add(self, thread, stack, state, t_ns, count) -> None:
        # a trace of several processes, not merged: a table per process (its threads' roots say so)
        group = thread.process if len(thread.roots) > 1 else None
        self.by_stack[(group, stack)] += count
        self.threads.add(thread)

    def render(self, out: IO) -> None:
        h = self.header
        n = sum(self.by_stack.values())
        asked = h.get('rate_hz') or 1e9 / self.period_ns
        rate = f"{asked:g} Hz"
        if self.ticks and self.end_ns and isinstance(h.get("start_mono_ns"), int) and self.end_ns > h["start_mono_ns"]:
            rate = f"asked {asked:g} Hz, achieved {self.ticks / ((self.end_ns - h['start_mono_ns']) / 1e9):.0f} Hz"
        groups = sorted({g for g, _ in self.by_stack}, key=lambda g: g.proc if g is not None else -1)
        if self.processes and any(g is not None for g in groups):
            # a table per process: every process the filters keep has its line, one whose samples
            # were all left out (a master blocked in `select` the whole time, without --idle) too
            groups = sorted(self.processes, key=lambda g: g.proc)
        where = (f"{len(self.processes)} processes" if len(self.processes) > 1 else
                 f"pid {h.get('pid')}")
        t = self.sample_type
        if not self.names_type:
            what = f"{n:,} samples ({self.period_ns / 1e6:g} ms each, {rate})"
        elif t.sampled:
            what = f"{n:,} samples of {self.type_words()} ({t.value / 1e6:g} ms each, {rate})"
        else:
            what = f"{n:,} {printable(t.unit)} of {printable(self.type_words())}"
        out.write(f"sdb summary: {what}, {len(self.threads)} thread(s); {where}, ruby {printable(h.get('ruby'))}\n")
        for g in groups:
            if g is not None:
                ths = sum(1 for t in self.threads if t.process is g)
                m = sum(c for (gg, _), c in self.by_stack.items() if gg is g)
                ended = f", ended ({printable(g.end_reason)})" if g.end_reason else ""
                if not m:
                    out.write(f"\n{printable(g.label)}: no samples shown{ended} (without --idle, those "
                              f"of blocked threads are left out; the filters apply too)\n")
                    continue
                out.write(f"\n{printable(g.label)}: {m:,} {self.counted()}, {ths} thread(s){ended}\n")
            self.table(out, {st: c for (gg, st), c in self.by_stack.items() if gg is g})

    def counted(self) -> str:
        """What the numbers count: samples, or a measured type's unit."""
        return "samples" if self.sample_type.sampled else printable(self.sample_type.unit)

    def table(self, out: IO, by_stack: Dict) -> None:
        own: Counter = Counter()
        total: Counter = Counter()
        keys: Dict[object, Tuple] = {}
        n = 0
        for stack, count in by_stack.items():
            n += count
            if not stack.frames:
                continue
            ks = [keys.setdefault(f, self.key(f)) for f in stack.frames]
            own[ks[-1]] += count
            for k in set(ks):
                total[k] += count
        out.write(f"{'TOTAL':>10} {'(pct)':>9} {self.counted().upper()[:10]:>10} {'(pct)':>9}  {self.what}\n")
        pct = (lambda c: 100.0 * c / n) if n else (lambda c: 0.0)
        for k in sorted(total, key=lambda k: (-own[k], -total[k], self.describe(k))):
            out.write(f"{total[k]:>10} {pct(total[k]):>8.2f}% {own[k]:>10} {pct(own[k]):>8.2f}%  "
                      f"{printable(self.describe(k))}\n")
