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


def _kept(sp, keys, progress):
    """(index, _Proc, thread id of the trace, stack id, state, span id of the trace, count) of each
    group the pass keeps: of a process it keeps, in a state it shows (every group counted read)."""
    only = sp.only_states
    for i, (proc, th, sid, st, span, n) in enumerate(keys):
        sp.samples_in += n
        if progress is not None:
            progress.update(n)
        c = sp.ctx.get(proc)
        if c is None:
            continue
        if c.base:
            th |= c.base
            span = span | c.base if span else 0
        if sp.keep(th, st) and (only is None or st in only):
            yield i, c, th, sid, st, span, n


def _aggregate(sp, reporter, keys, progress) -> None:
    """SamplePass._aggregate: one call per (thread, stack, state) of each process."""
    by_proc: Dict[object, Dict[tuple, int]] = {}
    for _, c, th, sid, st, _, n in _kept(sp, keys, progress):
        counts = by_proc.get(c)
        if counts is None:
            counts = by_proc[c] = {}
        counts[(th, sid, st)] = counts.get((th, sid, st), 0) + n
    fixed = sp.types[0].value or 0
    for c, counts in by_proc.items():
        for (serial, sid, st), n in counts.items():
            sp._give(reporter, sp.thread(serial), sp.stack(c, sid, st, 0), st, None, n, 0, n * fixed)


def _by_unit(sp, reporter, keys, progress) -> None:
    """SamplePass._by_unit for an aggregating reporter: one call per (thread, stack, state, unit)."""
    counts: Dict[tuple, int] = {}
    for _, c, th, sid, st, span, n in _kept(sp, keys, progress):
        u = sp.unit(span)
        if sp.unit_kept(u):
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
    states = sp.o.states
    threads_of: Dict[int, object] = {}
    out = n_unnamed = 0
    for i, c, th, sid, st, span, n in _kept(sp, keys, progress):
        stack = c.by_sid.get((sid, st if states else -1)) or sp.stack(c, sid, st, 0)
        tobj = threads_of.get(th)
        if tobj is None:
            tobj = threads_of[th] = sp.thread(th)
        if units:
            u = sp.unit(span)
            if not sp.unit_kept(u):
                continue
            reporter.add_unit_times(tobj, sp.unit_stack(stack, u), st, times[i], u)
        else:
            reporter.add_times(tobj, stack, st, 0, times[i])
        out += n
        if sp.has_unnamed(stack):
            n_unnamed += n
    sp.samples_out += out
    sp.samples_unnamed += n_unnamed
