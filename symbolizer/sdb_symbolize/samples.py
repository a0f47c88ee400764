"""The symbolizer's sample pass: streams the samples of a trace, applies the filters every format
shares (--thread, --from/--to, --idle, --states, --no-lines), names each stack once (samples refer
to deduplicated stacks, so resolution is cached per stack id) and hands the reporter either every
sample in time order (timeline formats) or one call per distinct (thread, stack, state) with its
count (aggregating formats). Samples carry a sample type (format 4, sdb_trace.sample_types): a
reporter is handed those of the chosen type (ProfileOptions.sample_type), or, when it shows every
type (`all_types`: pprof, speedscope), all of them with their values per type. Memory grows with
distinct stacks, never with samples."""
from __future__ import annotations

from collections import Counter, defaultdict
from typing import Dict, FrozenSet, List, Optional, Tuple

from sdb_trace import (PROC_SHIFT, STATE_BLOCKED, STATE_GVL_WAIT, STATE_NAMES, STATE_RUNNING, STATE_UNKNOWN, Tables,
                       TraceFile)

from . import grouped
from .options import ProfileOptions, UsageError
from .recorded import (NO_UNIT, CompactStack, CompactStacks, Process, Progress, Stack, Thread, endpoint_frame, endpoint_name,  # noqa: F401
                       function_frame, request_frame, state_name, unit_label)
from .resolve import UNKNOWN_ISEQ_PREFIX, Frame, Resolver


class FilterError(UsageError):
    """A filter that matches nothing or makes no sense: one line, exit code 2."""


class _Proc:
    """One process of the trace in a pass: its tables, the Resolver of its frames, the stacks whose
    names depend on time, and its named stacks by id."""

    def __init__(self, tables: Tables, labels: str, process: Process, kept: Optional["_Proc"] = None):
        self.t = tables
        self.proc = tables.proc
        self.process = process
        self.base = tables.proc << PROC_SHIFT          # a thread or span serial here -> its id in the trace
        if kept is not None and kept.t is tables and kept.resolver.still_holds():
            self.resolver, self.by_sid = kept.resolver, kept.by_sid     # the names of an earlier pass hold
        else:
            self.resolver = Resolver(tables, labels)
            self.by_sid: Dict[Tuple[int, int], Stack] = {}   # (stack id, state or -1) -> Stack, for static stacks
        self.ambiguous = self._ambiguous_stacks()
        self.resolver.static_names = self._static

    def _ambiguous_stacks(self) -> FrozenSet[int]:
        """Stack ids whose names depend on time (an address named twice): resolved per sample."""
        t = self.t
        self._static = False
        if not t.ebpf_pauses and not any(len(v) > 1 for table in (t.iseqs, t.cfuncs) for v in table.values()):
            self._static = True
            return frozenset()                  # no address was ever named twice, no pause: the usual case
        fids = {fid for fid in range(len(t.frame_kind)) if self.resolver._ambiguous(fid)}
        if not fids:
            return frozenset()
        return frozenset(sid for sid, st in enumerate(t.stacks) if not fids.isdisjoint(st))


class KeptNames:
    """The named stacks of one source kept from pass to pass while the source grows (the sidecar's
    push names each interval's samples with the tables read so far): an interval names only the
    stacks no earlier one named. What is kept is exactly the pass's own caches (each process's
    Resolver and its stacks by id, the interned Stacks), and a process's are dropped as soon as
    its Resolver says a name it cached may no longer hold (Resolver.still_holds) or the naming
    options differ: every name is the one a fresh pass over the same tables gives."""

    def __init__(self):
        self.clear(None)

    def clear(self, options: Optional[tuple]) -> None:
        self.options = options
        self.procs: Dict[int, _Proc] = {}
        self.interned: Dict[Tuple[Frame, ...], Stack] = {}
        self.unnamed: Dict[int, bool] = {}


class SamplePass:
    """Streams the samples of one trace into one reporter. A trace of a process tree holds several
    processes, each with its own ids: threads and spans get ids of the trace (Tables.gid), stacks
    are named by their process's Resolver, and each Thread knows its Process.
    `source`: a TraceFile, or a MemoryTrace that kept its samples (anything with `tables` and
    `iter_samples(on_batch, windows, spans, proc)`)."""

    def __init__(self, source: TraceFile, options: ProfileOptions, kept: Optional[KeptNames] = None):
        self.source = source
        tables = source.tables
        self.t = tables
        self.o = options
        self.idle = options.idle        # a reporter that wants idle samples turns it on (run)
        procs = [tables.procs[k] for k in sorted(tables.procs)]
        self.multi = len(procs) > 1
        self.processes: Dict[int, Process] = {pt.proc: Process(pt) for pt in procs}
        if options.pids:
            known = {pr.pid for pr in self.processes.values()}
            for pid in options.pids:
                if pid not in known:
                    some = ", ".join(str(k) for k in sorted(known))
                    raise FilterError(f"--pid {pid}: no such process in the trace (processes: {some})")
            procs = [pt for pt in procs if self.processes[pt.proc].pid in options.pids]
        if kept is not None and kept.options != (options.labels, options.lines, options.states):
            kept.clear((options.labels, options.lines, options.states))
        old = kept.procs if kept is not None else {}
        self.ctx: Dict[int, _Proc] = {pt.proc: _Proc(pt, options.labels, self.processes[pt.proc], old.get(pt.proc))
                                      for pt in procs}
        if kept is not None:
            kept.procs.update(self.ctx)
        split = self.multi and not options.merge_processes
        self.threads: Dict[int, Thread] = {}
        self.spans: Dict[int, dict] = {}        # span id in the trace -> its span (ids of the trace inside)
        for c in self.ctx.values():
            for s, th in c.t.threads.items():
                self.threads[c.base | s] = Thread(c.base | s, th, c.process, split)
            if not c.base:
                self.spans.update(c.t.spans)
                continue
            for sid, sp in c.t.spans.items():
                self.spans[c.base | sid] = dict(sp, span=c.base | sid, parent=c.base | sp["parent"] if sp["parent"]
                                                else 0, thread=c.base | sp["thread"] if sp["thread"] else 0)
        self._split = split
        self.allowed = self._thread_filter()
        start = tables.header.get("start_mono_ns", 0)
        self.lo = start + int(options.from_s * 1e9) if options.from_s is not None else None
        self.hi = start + int(options.to_s * 1e9) if options.to_s is not None else None
        if self.lo is not None and self.hi is not None and self.hi < self.lo:
            raise FilterError(f"--to ({options.to_s} s) is before --from ({options.from_s} s)")
        self._interned: Dict[Tuple[Frame, ...], Stack] = kept.interned if kept is not None else {}
        # a reporter reading each stack once (compact_stacks: flamegraph, firefox) is handed
        # CompactStacks: the pass's frames numbered, each stack the bytes of its numbers
        self._compact: Optional[CompactStacks] = None
        self._state_frames = {st: Frame(f"({name})", None, 0) for st, name in STATE_NAMES.items()}
        self.samples_in = 0    # samples read
        self.samples_out = 0   # samples handed over
        self.samples_unnamed = 0  # of those, samples with a frame no name could be proven for
        self._unnamed: Dict[int, bool] = kept.unnamed if kept is not None else {}   # Stack.id -> it has such a frame
        self._units: Dict[int, Optional[dict]] = {}     # span id -> its unit of work (the root span)
        self._check_endpoints()
        self.types = tables.sample_types                 # what the recording's samples measure
        self.chosen = self._choose_type()               # the one single-type outputs show
        self._targets: Dict[Tuple[int, int], Tuple[int, ...]] = {}
        self._type_setup(None)

    # ------------------------------------------------------------------ units of work (spans)
    def uses_spans(self, reporter=None) -> bool:
        o = self.o
        return bool(o.endpoints or o.by or o.slower_than_ms is not None or getattr(reporter, "by_unit", False))

    def unit(self, span: int) -> Optional[dict]:
        """The unit of work a sample in span `span` (an id of the trace) belongs to: the outermost
        span of its chain (a label inside a request belongs to the request); None: none (0, or a
        span the trace does not describe: its events were lost)."""
        u = self._units.get(span, False)
        if u is not False:
            return u
        sp = self.spans.get(span) if span else None
        seen = 0
        while sp is not None and sp["parent"] and seen < 64:
            up = self.spans.get(sp["parent"])
            if up is None:
                break
            sp, seen = up, seen + 1
        self._units[span] = sp
        return sp

    def _check_endpoints(self) -> None:
        if not self.o.endpoints:
            return
        known = {sp["endpoint"] for sp in self.spans.values() if sp["endpoint"] is not None}
        for e in self.o.endpoints:
            if e not in known:
                some = ", ".join(sorted(known)[:20]) or "none"
                raise FilterError(f"--endpoint {e}: no request or job of the trace has that endpoint "
                                  f"(endpoints: {some})")

    def unit_kept(self, u: Optional[dict]) -> bool:
        o = self.o
        if o.endpoints and (u is None or u["endpoint"] not in o.endpoints):
            return False
        if o.slower_than_ms is not None and not o.compare_slow:
            if u is None or u["begin_ns"] is None or u["end_ns"] is None:
                return False
            if (u["end_ns"] - u["begin_ns"]) < o.slower_than_ms * 1e6:
                return False
        return True

    def unit_stack(self, stack: Stack, u: Optional[dict]) -> Stack:
        """--by endpoint / --by request: the stack under a root frame naming its endpoint (and
        request)."""
        if self.o.by == "endpoint":
            return self.intern((endpoint_frame(u),) + stack.frames)
        if self.o.by == "request":
            return self.intern((request_frame(u),) + stack.frames)
        return stack

    def spans_shown(self) -> List[dict]:
        """The units of work (outermost spans) the filters keep, with the spans inside them, on the
        threads the filters keep, in the order they began: what a timeline shows as markers."""
        shown = []
        for sp in self.spans.values():
            if sp["thread"] not in self.threads and self.multi:
                continue                        # a process left out by --pid
            if self.allowed is not None and sp["thread"] not in self.allowed:
                continue
            if sp["begin_ns"] is None and sp["end_ns"] is None:
                continue
            if not self.unit_kept(self.unit(sp["span"])):
                continue
            shown.append(sp)
        shown.sort(key=lambda sp: (sp["begin_ns"] if sp["begin_ns"] is not None else -1, sp["span"]))
        return shown

    # ------------------------------------------------------------------ filters
    def _thread_filter(self) -> Optional[FrozenSet[int]]:
        if not self.o.threads:
            return None
        chosen = set()
        names = {c.base | s: th.get("names") or () for c in self.ctx.values() for s, th in c.t.threads.items()}
        for spec in self.o.threads:
            hits = {s for s, th in self.threads.items()
                    if spec in (th.name, th.label, str(th.tid), str(th.serial)) or spec in names.get(s, ())}
            if not hits:
                known = ", ".join(f"{th.name or '-'} (tid {th.tid})" for th in self.threads.values())
                raise FilterError(f"--thread {spec}: no such thread in the trace (threads: {known or 'none'})")
            chosen |= hits
        return frozenset(chosen)

    # ------------------------------------------------------------------ stacks
    def intern(self, frames: Tuple[Frame, ...]) -> Stack:
        if self._compact is not None:
            return self._compact.intern(frames, len(self._interned))
        s = self._interned.get(frames)
        if s is None:
            s = self._interned[frames] = Stack(len(self._interned), frames)
        return s

    def use_compact_stacks(self) -> None:
        """Stacks interned from now on are CompactStacks (a reporter that reads each once)."""
        if self._compact is None:
            self._compact = CompactStacks()
            for c in self.ctx.values():
                c.resolver.keep_stacks = False

    def _named(self, c: _Proc, sid: int, state: int, t_ns: int, lo_ns: Optional[int] = None) -> Stack:
        frames = c.resolver.stack(sid, t_ns, lo_ns)
        if not self.o.lines:
            frames = tuple(function_frame(f) for f in frames)
        if self.o.states:
            frames = (self._state_frames.get(state, self._state_frames[STATE_UNKNOWN]),) + frames
        return self.intern(frames)

    def stack(self, c: _Proc, sid: int, state: int, t_ns: int, lo_ns: Optional[int] = None) -> Stack:
        """The named stack of one sample of process `c` (its frames copied between lo_ns and t_ns)."""
        if sid in c.ambiguous:
            return self._named(c, sid, state, t_ns, lo_ns)
        key = (sid, state if self.o.states else -1)
        s = c.by_sid.get(key)
        if s is None:
            s = c.by_sid[key] = self._named(c, sid, state, t_ns)
        return s

    def has_unnamed(self, stack: Stack) -> bool:
        """The stack has a Ruby frame whose ISeq no name could be proven for: `(unknown ISeq 0x...)`."""
        u = self._unnamed.get(stack.id)
        if u is None:
            frames = stack.frames if not isinstance(stack, CompactStack) else \
                map(stack.table.__getitem__, set(memoryview(stack.data).cast(stack.code)))   # its distinct frames
            u = self._unnamed[stack.id] = any(f.label.startswith(UNKNOWN_ISEQ_PREFIX) for f in frames)
        return u

    def thread(self, serial: int) -> Thread:
        """The Thread of a thread id of the trace (one with no `thread` record gets a bare one)."""
        th = self.threads.get(serial)
        if th is None:
            c = self.ctx.get(serial >> PROC_SHIFT)
            th = self.threads[serial] = Thread(serial, None, c.process if c else None, self._split)
        return th

    def keep(self, serial: int, state: int) -> bool:
        return (self.idle or state != STATE_BLOCKED) and (self.allowed is None or serial in self.allowed)

    # ------------------------------------------------------------------ sample types
    def _choose_type(self) -> int:
        """The index of the sample type single-type outputs show (ProfileOptions.sample_type; None:
        the recording's first, wall for a time recording: every format's output before types)."""
        name = self.o.sample_type
        if name is None:
            return 0
        for t in self.types:
            if t.name == name:
                return t.index
        raise FilterError(f"--sample-type {name}: the recording has no such sample type "
                          f"(its types: {', '.join(t.name for t in self.types)})")

    def targets(self, w: int, state: int) -> Tuple[int, ...]:
        """The sample types a sample of written type `w` in thread state `state` counts in: `w`, and
        every type derived from it that takes that state (cpu: running)."""
        key = (w, state)
        got = self._targets.get(key)
        if got is None:
            got = self._targets[key] = (w,) + tuple(t.index for t in self.types
                                                    if t.of == w and state in t.states)
        return got

    def values_of(self, w: int, state: int, v: int) -> Tuple[Optional[int], ...]:
        """A sample's (or a group's) values, one per sample type: `v` where it counts, None elsewhere."""
        out: List[Optional[int]] = [None] * len(self.types)
        for k in self.targets(w, state):
            out[k] = v
        return tuple(out)

    def _type_setup(self, reporter) -> None:
        """What the pass hands `reporter`: every sample (`all_types`, with its values), or those of
        the chosen type only (a derived type's: those of its states)."""
        self.r_values = bool(getattr(reporter, "values", False))
        self.r_all = bool(getattr(reporter, "all_types", False))
        chosen = self.types[self.chosen]
        self.from_type = chosen.index if chosen.of is None else chosen.of     # the written type it draws on
        self.only_states = None if self.r_all or chosen.states is None else frozenset(chosen.states)
        self.counts_values = not chosen.sampled and not self.r_values       # counts are its summed values

    def wants_batch(self, w: int) -> bool:
        return self.r_all or w == self.from_type

    def _give(self, reporter, th, stack, st, t, n, w, v, u=None, by_unit=False) -> None:
        """Hands `n` samples (their values summing to `v`) of written type `w` to the reporter."""
        self.samples_out += n
        if self.has_unnamed(stack):
            self.samples_unnamed += n
        if self.r_values:
            vals = self.values_of(w, st, v)
            if by_unit:
                reporter.add_unit(th, stack, st, t, n, u, values=vals)
            else:
                reporter.add(th, stack, st, t, n, values=vals)
            return
        count = v if self.counts_values else n
        if by_unit:
            reporter.add_unit(th, stack, st, t, count, u)
        else:
            reporter.add(th, stack, st, t, count)

    # ------------------------------------------------------------------ the pass
    def run(self, reporter, progress: Optional[Progress] = None) -> None:
        if getattr(reporter, "wants_idle", False):
            self.idle = True
        if getattr(reporter, "compact_stacks", False):
            self.use_compact_stacks()
        self._type_setup(reporter)
        # samples a source grouped as they came (the push's: grouped.py), else one of the three passes
        if not grouped.run(self, reporter, getattr(self.source, "sample_groups", lambda: None)(), progress):
            (self._by_unit if self.uses_spans(reporter) else self._timeline if getattr(reporter, "timeline", False)
             else self._aggregate)(reporter, progress)
        if progress is not None:
            progress.finish()

    def _samples(self, on_batch) -> None:
        """on_batch(c, base, dts, threads, stacks, states, wins[, spans, ticks], type, values) for each
        batch of a process the pass keeps whose type the reporter is shown."""
        ctx = self.ctx

        def each(proc, *batch):
            c = ctx.get(proc)
            if c is not None and self.wants_batch(batch[-2]):
                on_batch(c, *batch)
            else:
                self.samples_in += len(batch[1])
        return each

    def _aggregate(self, reporter, progress) -> None:
        by_type: Dict[Tuple[_Proc, int], Counter] = {}
        valued: Dict[Tuple[_Proc, int], Dict[tuple, List[int]]] = {}   # value columns: key -> [samples, sum]
        lo, hi = self.lo, self.hi
        timed = lo is not None or hi is not None
        lo_v = lo if lo is not None else -1 << 63
        hi_v = hi if hi is not None else 1 << 63

        def on_batch(c, base, dts, threads, stacks, states, wins, w, vals):
            n = len(dts)
            self.samples_in += n
            if progress is not None:
                progress.update(n)
            if not n:
                return
            whole = True
            if timed:
                first, last = base + min(dts), base + max(dts)
                if last < lo_v or first > hi_v:
                    return
                whole = first >= lo_v and last <= hi_v
            amb = c.ambiguous
            counts = by_type.get((c, w))
            if counts is None:
                counts = by_type[(c, w)] = Counter()
            if vals is None and whole and (not amb or amb.isdisjoint(stacks)):
                counts.update(zip(threads, stacks, states))   # C loop: the hot path
                return
            sums = valued.setdefault((c, w), {}) if vals is not None else None
            for i, (dt, th, sid, st, win) in enumerate(zip(dts, threads, stacks, states, wins)):
                t = base + dt
                if t < lo_v or t > hi_v:
                    continue
                key = (th, self.stack(c, sid, st, t, t - win * 1000) if sid in amb else sid, st)
                counts[key] += 1
                if sums is not None:
                    acc = sums.get(key)
                    if acc is None:
                        acc = sums[key] = [0, 0]
                    acc[0] += 1
                    acc[1] += vals[i]

        self.source.iter_samples(self._samples(on_batch), windows=True, proc=None, values=True)
        only = self.only_states
        for (c, w), counts in by_type.items():
            fixed = self.types[w].value or 0
            sums = valued.get((c, w), {})
            for key, n in counts.items():
                serial, sid, st = key
                serial |= c.base
                if not self.keep(serial, st) or (only is not None and st not in only):
                    continue
                stack = sid if isinstance(sid, Stack) else self.stack(c, sid, st, 0)
                nv, sv = sums.get(key, (0, 0))
                self._give(reporter, self.thread(serial), stack, st, None, n, w, (n - nv) * fixed + sv)

    def _timeline(self, reporter, progress) -> None:
        lo_v = self.lo if self.lo is not None else -1 << 63
        hi_v = self.hi if self.hi is not None else 1 << 63
        idle, allowed, only = self.idle, self.allowed, self.only_states
        states = self.o.states
        add = reporter.add
        thread = self.thread
        plain = not self.r_values      # the usual case: count 1 a sample, no values

        unnamed = self._unnamed
        threads_of: Dict[int, Thread] = {}
        # a reporter that keeps each sample's time but not their order across (thread, stack, state)
        # takes a batch's samples grouped by it (one call a group, not a sample)
        add_times = getattr(reporter, "add_times", None) if plain else None

        def on_batch(c, base, dts, threads, stacks, sts, wins, w, vals):
            self.samples_in += len(dts)
            if progress is not None:
                progress.update(len(dts))
            if add_times is not None and dts and (not c.ambiguous or c.ambiguous.isdisjoint(stacks)) \
                    and lo_v <= base + min(dts) and base + max(dts) <= hi_v:
                return self._grouped(c, base, dts, threads, stacks, sts, add_times, threads_of)
            out = 0
            n_unnamed = 0
            amb, cache, pbase = c.ambiguous, c.by_sid, c.base
            fixed = self.types[w].value
            for i, (dt, th, sid, st, win) in enumerate(zip(dts, threads, stacks, sts, wins)):
                if st == STATE_BLOCKED and not idle:
                    continue
                if only is not None and st not in only:
                    continue
                if pbase:
                    th |= pbase
                if allowed is not None and th not in allowed:
                    continue
                t = base + dt
                if t < lo_v or t > hi_v:
                    continue
                if sid in amb:
                    stack = self.stack(c, sid, st, t, t - win * 1000)
                else:
                    stack = cache.get((sid, st if states else -1))
                    if stack is None:
                        stack = self.stack(c, sid, st, t)
                tobj = threads_of.get(th)
                if tobj is None:
                    tobj = threads_of[th] = thread(th)
                if plain:
                    add(tobj, stack, st, t, 1)
                else:
                    add(tobj, stack, st, t, 1, values=self.values_of(w, st, vals[i] if vals is not None else fixed))
                out += 1
                u = unnamed.get(stack.id)
                if u is None:
                    u = self.has_unnamed(stack)
                if u:
                    n_unnamed += 1
            self.samples_out += out
            self.samples_unnamed += n_unnamed

        self.source.iter_samples(self._samples(on_batch), windows=True, proc=None, values=True)

    def _grouped(self, c, base, dts, threads, stacks, sts, add_times, threads_of) -> None:
        """_timeline's batch, for a reporter with add_times(thread, stack, state, base, dts): the
        same samples, filtered and named alike, one call per (thread, stack, state) with the times
        of its samples (base + each dt). Only for a batch no time filter cuts and with no stack
        named by time (every sample of a group then has one name)."""
        groups: Dict[tuple, list] = defaultdict(list)
        for key, dt in zip(zip(threads, stacks, sts), dts):
            groups[key].append(dt)
        idle, allowed, only, pbase = self.idle, self.allowed, self.only_states, c.base
        states = self.o.states
        out = n_unnamed = 0
        for (th, sid, st), times in groups.items():
            if (st == STATE_BLOCKED and not idle) or (only is not None and st not in only):
                continue
            if pbase:
                th |= pbase
            if allowed is not None and th not in allowed:
                continue
            stack = c.by_sid.get((sid, st if states else -1)) or self.stack(c, sid, st, base)
            tobj = threads_of.get(th)
            if tobj is None:
                tobj = threads_of[th] = self.thread(th)
            add_times(tobj, stack, st, base, times)
            out += len(times)
            if self.has_unnamed(stack):
                n_unnamed += len(times)
        self.samples_out += out
        self.samples_unnamed += n_unnamed

    def _by_unit(self, reporter, progress) -> None:
        """Either pass, with each sample's unit of work (its span's outermost span): filtered by
        --endpoint and --slower-than, its endpoint as the root frame with --by endpoint, and handed
        to a reporter that wants it (`by_unit`) with `add_unit`."""
        lo_v = self.lo if self.lo is not None else -1 << 63
        hi_v = self.hi if self.hi is not None else 1 << 63
        timeline = getattr(reporter, "timeline", False)
        by_unit = getattr(reporter, "by_unit", False)
        chosen = self.types[self.chosen]
        # GVL blame: of the samples waiting for the GVL, when the type shown has them
        blame = getattr(reporter, "gvl_blame", False) and (chosen.states is None or STATE_GVL_WAIT in chosen.states)
        groups = getattr(reporter, "groups_units", False)    # it groups by unit itself: no root frame
        only = self.only_states
        counts: Counter = Counter()
        sums: Dict[tuple, List[int]] = {}
        thread = self.thread

        def on_batch(c, base, dts, threads, stacks, sts, wins, spans, ticks, w, vals):
            self.samples_in += len(dts)
            if progress is not None:
                progress.update(len(dts))
            pbase = c.base
            if pbase:
                threads = [th | pbase for th in threads]
                spans = [sp | pbase if sp else 0 for sp in spans]
            if blame and w == self.from_type:
                self._blame(reporter, c, base, dts, threads, stacks, sts, wins, spans, ticks)
            fixed = self.types[w].value or 0
            for i, (dt, th, sid, st, win, sp) in enumerate(zip(dts, threads, stacks, sts, wins, spans)):
                t = base + dt
                if t < lo_v or t > hi_v or not self.keep(th, st) or (only is not None and st not in only):
                    continue
                u = self.unit(sp)
                if not self.unit_kept(u):
                    continue
                v = vals[i] if vals is not None else fixed
                if timeline:
                    stack = self.stack(c, sid, st, t, t - win * 1000)
                    if not groups:
                        stack = self.unit_stack(stack, u)
                    self._give(reporter, thread(th), stack, st, t, 1, w, v, u, by_unit)
                else:
                    key = self.stack(c, sid, st, t, t - win * 1000) if sid in c.ambiguous else sid
                    key = (c, th, key, st, u["span"] if u is not None else 0, w)
                    counts[key] += 1
                    acc = sums.get(key)
                    if acc is None:
                        sums[key] = [v]
                    else:
                        acc[0] += v

        self.source.iter_samples(self._samples(on_batch), spans=True, proc=None, values=True)
        for key, n in counts.items():
            c, serial, sid, st, us, w = key
            stack = sid if isinstance(sid, Stack) else self.stack(c, sid, st, 0)
            u = self.spans.get(us) if us else None
            self._give(reporter, thread(serial), stack if groups else self.unit_stack(stack, u), st, None, n, w,
                       sums[key][0], u, by_unit)

    def _blame(self, reporter, c, base, dts, threads, stacks, sts, wins, spans, ticks) -> None:
        """GVL blame: each sample of a thread waiting for the GVL, with the one thread the same tick
        saw running Ruby (it held the GVL then: one holder at a time), its unit and stack; none when
        the tick saw no running thread or more than one (Ruby 3.1, where states are worked out from
        the kernel's, can see two: not proof of either). Tick 0 and traces without ticks: no blame.
        A batch is one process's: its ticks, its GVL."""
        i, n = 0, len(dts)
        while i < n:
            j = i
            while j < n and ticks[j] == ticks[i]:
                j += 1
            if ticks[i] and STATE_GVL_WAIT in sts[i:j]:
                runners = [k for k in range(i, j) if sts[k] == STATE_RUNNING]
                holder = runners[0] if len(runners) == 1 else None
                held = None
                if holder is not None:
                    t = base + dts[holder]
                    held = (self.stack(c, stacks[holder], STATE_RUNNING, t, t - wins[holder] * 1000),
                            self.unit(spans[holder]))
                for k in range(i, j):
                    if sts[k] == STATE_GVL_WAIT:
                        if held is not None and threads[k] != threads[holder]:
                            reporter.add_blame(self.unit(spans[k]), held[0], held[1])
                        else:
                            reporter.add_blame(self.unit(spans[k]), None, None)
            i = j
