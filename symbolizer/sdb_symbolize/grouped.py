"""The sample pass over samples already grouped (the sidecar's push: its samples are counted by
group in C as the interval is cut, sdb_sidecar.push._groups): a source may offer
`sample_groups()`, an object with `keys()`, [(proc, thread, stack, state, span, count)] in the order
each group was first seen, and `times()`, each group's sample times (array('q'), monotonic ns), or
None. The reporter is then handed what SamplePass's per-sample strategies hand it (the same calls,
values and first-seen order, so the same bytes), with a Python step per group rather than per
sample. Only where that holds: no filter by time, thread, endpoint or duration, no --by, no GVL blame,
one sample type written with no values (what the grouping reads), and no stack named by time (each
sample of a group then has one name); otherwise `run` says False and the usual pass runs."""
from __future__ import annotations

from typing import Dict, Optional

from sdb_trace import STATE_BLOCKED

from .recorded import Progress


def run(sp, reporter, groups, progress: Optional[Progress]) -> bool:
    """Hands `groups`' samples to `reporter` as SamplePass `sp` would hand them one by one; False
    (nothing done) where the grouping cannot give the same."""
    o = sp.o
    if groups is None or sp.lo is not None or sp.hi is not None or sp.allowed is not None or o.endpoints \
            or o.by or o.slower_than_ms is not None or getattr(reporter, "gvl_blame", False) \
            or getattr(reporter, "groups_units", False) or sp._compact is not None:
        return False
    timeline = getattr(reporter, "timeline", False)
    units = sp.uses_spans(reporter)         # with no filter: the reporter's by_unit
    if timeline and (sp.r_values or sp.counts_values
                     or getattr(reporter, "add_unit_times" if units else "add_times", None) is None):
        return False
    keys = groups.keys()
    ctx = sp.ctx
    for proc, _, sid, _, _, _ in keys:
        c = ctx.get(proc)
        if c is not None and c.ambiguous and sid in c.ambiguous:
            return False
    if not sp.wants_batch(0):               # the groups are of the written type 0
        sp.samples_in += sum(k[5] for k in keys)
    elif timeline:
        _timeline(sp, reporter, keys, groups.times(), units, progress)
    elif units:
        _by_unit(sp, reporter, keys, progress)
    else:
        _aggregate(sp, reporter, keys, progress)
    return True


def _aggregate(sp, reporter, keys, progress) -> None:
    """SamplePass._aggregate: one call per (thread, stack, state) of each process."""
    by_proc: Dict[int, Dict[tuple, int]] = {}
    for proc, th, sid, st, _, n in keys:
        sp.samples_in += n
        if progress is not None:
            progress.update(n)
        if proc in sp.ctx:
            counts = by_proc.get(proc)
            if counts is None:
                counts = by_proc[proc] = {}
            key = (th, sid, st)
            counts[key] = counts.get(key, 0) + n
    fixed = sp.types[0].value or 0
    only = sp.only_states
    for proc, counts in by_proc.items():
        c = sp.ctx[proc]
        for (serial, sid, st), n in counts.items():
            serial |= c.base
            if not sp.keep(serial, st) or (only is not None and st not in only):
                continue
            sp._give(reporter, sp.thread(serial), sp.stack(c, sid, st, 0), st, None, n, 0, n * fixed)


def _by_unit(sp, reporter, keys, progress) -> None:
    """SamplePass._by_unit for an aggregating reporter: one call per (thread, stack, state, unit)."""
    counts: Dict[tuple, int] = {}
    only = sp.only_states
    for proc, th, sid, st, span, n in keys:
        sp.samples_in += n
        if progress is not None:
            progress.update(n)
        c = sp.ctx.get(proc)
        if c is None:
            continue
        if c.base:
            th |= c.base
            span = span | c.base if span else 0
        if not sp.keep(th, st) or (only is not None and st not in only):
            continue
        u = sp.unit(span)
        if not sp.unit_kept(u):
            continue
        key = (c, th, sid, st, u["span"] if u is not None else 0)
        counts[key] = counts.get(key, 0) + n
    fixed = sp.types[0].value or 0
    by_unit = getattr(reporter, "by_unit", False)
    for (c, serial, sid, st, us), n in counts.items():
        u = sp.spans.get(us) if us else None
        sp._give(reporter, sp.thread(serial), sp.unit_stack(sp.stack(c, sid, st, 0), u), st, None, n, 0,
                 n * fixed, u, by_unit)


def _timeline(sp, reporter, keys, times, units: bool, progress) -> None:
    """SamplePass._timeline (its batches grouped) and _by_unit for a timeline reporter: each group's
    times in one call, add_times or add_unit_times (the reporter keeps each sample's time, not their
    order across groups)."""
    idle, only, states = sp.idle, sp.only_states, sp.o.states
    threads_of: Dict[int, object] = {}
    out = n_unnamed = 0
    for (proc, th, sid, st, span, n), ts in zip(keys, times):
        sp.samples_in += n
        if progress is not None:
            progress.update(n)
        c = sp.ctx.get(proc)
        if c is None:
            continue
        if c.base:
            th |= c.base
            span = span | c.base if span else 0
        if (st == STATE_BLOCKED and not idle) or (only is not None and st not in only):
            continue
        stack = c.by_sid.get((sid, st if states else -1)) or sp.stack(c, sid, st, 0)
        tobj = threads_of.get(th)
        if tobj is None:
            tobj = threads_of[th] = sp.thread(th)
        if units:
            u = sp.unit(span)
            if not sp.unit_kept(u):
                continue
            reporter.add_unit_times(tobj, sp.unit_stack(stack, u), st, ts, u)
        else:
            reporter.add_times(tobj, stack, st, 0, ts)
        out += n
        if sp.has_unnamed(stack):
            n_unnamed += n
    sp.samples_out += out
    sp.samples_unnamed += n_unnamed
