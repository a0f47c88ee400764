from __future__ import annotations

from collections import Counter, defaultdict
from typing import IO, Dict, List, Optional

from sdb_trace import SPAN_KINDS, STATE_BLOCKED, STATE_GVL_WAIT, STATE_RUNNING
from sdb_trace.output import printable

from ..labels import GC_LABEL
from ..samples import NO_UNIT, endpoint_name
from .base import Reporter

# where a sample's wall time went, in the order the table shows it
WHERE = ("running", "GVL wait", "blocked", "GC", "unknown")
TOP_FRAMES = 3


def where_of(stack, state: int) -> str:
    if stack.frames and stack.frames[-1].label == GC_LABEL:
        return "GC"
    if state == STATE_RUNNING:
        return "running"
    if state == STATE_GVL_WAIT:
        return "GVL wait"
    if state == STATE_BLOCKED:
        return "blocked"
    return "unknown"


def percentile(sorted_ms: List[float], p: float) -> float:
    """The nearest-rank percentile (the smallest value with at least p% of the values at or below)."""
    if not sorted_ms:
        return float("nan")
    k = max(0, min(len(sorted_ms) - 1, -(-len(sorted_ms) * p // 100) - 1))
    return sorted_ms[int(k)]


class EndpointsReporter(Reporter):
    """Per endpoint (a Rails action, a job class, an Sdb.label endpoint): the requests or jobs that
    ended during the recording with their latency (p50/p95/p99/max, from the app's own clock at
    their begin and end), and where its threads' wall time went (running, waiting for the GVL,
    blocked, GC) with the innermost frames of each. Samples of every state count: one sample is one
    period of one thread's wall time."""

    name = "endpoints"
    extension = ".endpoints.txt"
    by_unit = True
    wants_idle = True
    gvl_blame = True

    def __init__(self, recording, options):
        super().__init__(recording, options)
        self.samples: Dict[str, Counter] = defaultdict(Counter)            # endpoint -> where -> samples
        self.leaves: Dict[str, Dict[str, Counter]] = defaultdict(lambda: defaultdict(Counter))
        # GVL blame: waiting endpoint -> holder's endpoint (None: no single holder seen) -> samples,
        # and -> holder's endpoint -> its innermost frame -> samples
        self.blame: Dict[str, Counter] = defaultdict(Counter)
        self.blame_leaves: Dict[str, Dict[Optional[str], Counter]] = defaultdict(lambda: defaultdict(Counter))

    def add_blame(self, unit, holder_stack, holder_unit) -> None:
        name = endpoint_name(unit)
        if holder_stack is None:
            self.blame[name][None] += 1
            return
        holder = endpoint_name(holder_unit)
        self.blame[name][holder] += 1
        leaf = holder_stack.frames[-1].label if holder_stack.frames else "(empty stack)"
        self.blame_leaves[name][holder][leaf] += 1

    def add(self, thread, stack, state, t_ns, count) -> None:
        self.add_unit(thread, stack, state, t_ns, count, None)

    def add_unit(self, thread, stack, state, t_ns, count, unit) -> None:
        name = endpoint_name(unit)
        where = where_of(stack, state)
        self.samples[name][where] += count
        leaf = stack.frames[-1].label if stack.frames else "(empty stack)"
        self.leaves[name][where][leaf] += count

    def counted(self) -> str:
        """What the sample columns count (the chosen sample type, when the recording has several)."""
        t = self.sample_type
        if not self.names_type:
            return f"samples ({self.period_ns / 1e6:g} ms of one thread's time each)"
        if t.sampled:
            return f"samples of {self.type_words()} ({t.value / 1e6:g} ms of one thread's time each)"
        return f"{printable(t.unit)} of {printable(self.type_words())}"

    def units(self) -> Dict[str, List[dict]]:
        """The outermost spans that ended within the recording, by endpoint (the sidecar wrote only
        those of its window: `attach` from its start, `record` from the app's)."""
        out: Dict[str, List[dict]] = defaultdict(list)
        for sp in self.spans.values():
            if sp["parent"] and sp["parent"] in self.spans:
                continue
            if sp["end_ns"] is None or sp["begin_ns"] is None:
                continue
            if self.end_ns is not None and sp["end_ns"] > self.end_ns:
                continue
            out[endpoint_name(sp)].append(sp)
        return out

    def render(self, out: IO) -> None:
        units = self.units()
        names = sorted(set(units) | set(self.samples),
                       key=lambda n: (n == NO_UNIT, -sum(self.samples[n].values()), n))
        total = sum(sum(c.values()) for c in self.samples.values())
        h = self.header
        out.write(f"sdb endpoints: {sum(len(v) for v in units.values()):,} requests/jobs ended in the recording, "
                  f"{total:,} {self.counted()}; pid {h.get('pid')}, "
                  f"ruby {printable(h.get('ruby'))}\n")
        out.write(f"{'ENDPOINT':<40} {'KIND':<7} {'COUNT':>7} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} "
                  f"{'max ms':>8} {'SAMPLES':>8}" + "".join(f" {w:>9}" for w in WHERE[:4]) + "\n")
        for n in names:
            us = units.get(n, [])
            ms = sorted((u["end_ns"] - u["begin_ns"]) / 1e6 for u in us)
            kinds = {SPAN_KINDS.get(u["kind"], "?") for u in us}
            kind = kinds.pop() if len(kinds) == 1 else ("mixed" if kinds else "")
            c = self.samples.get(n, Counter())
            ns = sum(c.values())
            lat = "".join(f" {percentile(ms, p):>8.1f}" for p in (50, 95, 99)) + f" {ms[-1]:>8.1f}" if ms \
                else "".join(f" {'-':>8}" for _ in range(4))
            shares = "".join(f" {100.0 * c[w] / ns:>8.1f}%" if ns else f" {'-':>9}" for w in WHERE[:4])
            out.write(f"{printable(n)[:40]:<40} {kind:<7} {len(us):>7}{lat} {ns:>8}{shares}\n")
        out.write("\nwhere each endpoint's time went (share of its samples), with its innermost frames:\n")
        for n in names:
            c = self.samples.get(n)
            if not c:
                continue
            ns = sum(c.values())
            out.write(f"{printable(n)}\n")
            for w in WHERE:
                if not c[w]:
                    continue
                tops = self.leaves[n][w].most_common(TOP_FRAMES)
                frames = ", ".join(f"{printable(label)} {100.0 * k / ns:.1f}%" for label, k in tops)
                out.write(f"  {w:<9} {100.0 * c[w] / ns:5.1f}%  {frames}\n")
        if any(n != NO_UNIT for n in self.blame):
            out.write("\nwho held the GVL while each endpoint waited for it (the one thread the same tick saw "
                      "running Ruby), with its innermost frames:\n")
            for n in names:
                c = self.blame.get(n)
                if not c or n == NO_UNIT:
                    continue
                waited = sum(c.values())
                out.write(f"{printable(n)}: {waited:,} samples waiting for the GVL\n")
                for holder, k in sorted(c.items(), key=lambda kv: (-kv[1], kv[0] or "")):
                    if holder is None:
                        out.write(f"  {'(no single running thread seen)':<40} {100.0 * k / waited:5.1f}%\n")
                        continue
                    tops = self.blame_leaves[n][holder].most_common(TOP_FRAMES)
                    frames = ", ".join(f"{printable(label)} {100.0 * m / waited:.1f}%" for label, m in tops)
                    out.write(f"  {printable(holder)[:40]:<40} {100.0 * k / waited:5.1f}%  {frames}\n")
        e = self.end or {}
        notes = []
        if e.get("span_unsure"):
            notes.append(f"{e['span_unsure']:,} samples taken while their thread's request or job changed, or on "
                         f"another fiber, are counted outside any")
        if e.get("spans_lost"):
            notes.append(f"{e['spans_lost']:,} begin/end events were overwritten before the sidecar read them: "
                         f"those requests are missing from the counts")
        if e.get("endpoints_refused"):
            notes.append(f"{e['endpoints_refused']:,} endpoint names were not kept (too long, or over the "
                         f"registry's 64 KiB of names): those requests show as (no endpoint)")
        for note in notes:
            out.write(f"note: {note}\n")
