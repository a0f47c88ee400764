"""The symbolizer's sample pass: streams the samples of a trace, applies the filters every format
shares (--thread, --from/--to, --idle, --states, --no-lines), names each stack once (samples refer
to deduplicated stacks, so resolution is cached per stack id) and hands the reporter either every
sample in time order (timeline formats) or one call per distinct (thread, stack, state) with its
count (aggregating formats). Memory grows with distinct stacks, never with samples."""
from __future__ import annotations

import sys
import time
from collections import Counter
from typing import Dict, FrozenSet, List, Optional, Tuple

from sdb_trace import (PROC_SHIFT, STATE_BLOCKED, STATE_GVL_WAIT, STATE_NAMES, STATE_RUNNING, STATE_UNKNOWN, Tables,
                       TraceFile)

from .options import ProfileOptions, UsageError
from .resolve import UNKNOWN_ISEQ_PREFIX, Frame, Resolver, thread_label


class FilterError(UsageError):
    """A filter that matches nothing or makes no sense: one line, exit code 2."""


class Process:
    """A recorded process as reporters see it (one object per process of the trace)."""
    __slots__ = ("proc", "pid", "ppid", "command", "label", "start_ns", "end_ns", "end_reason")

    TITLE_MAX = 80

    def __init__(self, tables: Tables):
        p = tables.process or {}
        end = tables.process_end or {}
        self.proc = tables.proc
        self.pid = tables.pid
        self.ppid = p.get("ppid")
        self.command = tables.command
        title = " ".join(self.command)
        if len(title) > self.TITLE_MAX:
            title = title[:self.TITLE_MAX - 3] + "..."
        self.label = f"process {self.pid} ({title})" if title else f"process {self.pid}"
        self.start_ns = p.get("at_ns")
        self.end_ns = end.get("at_ns")
        self.end_reason = end.get("reason")


class Thread:
    """A recorded thread as reporters see it (one object per thread). `serial` is its id in the
    trace (a thread of process p other than 0: p << PROC_SHIFT | its serial there); `roots`, the
    frames above its stack in a profile: its label, under its process's when the trace has several
    processes and they are not merged."""
    __slots__ = ("serial", "tid", "name", "label", "main", "start_ns", "end_ns", "process", "roots")

    def __init__(self, serial: int, rec: Optional[dict], process: Optional[Process] = None, split: bool = False):
        rec = rec or {}
        self.serial = serial
        self.process = process
        self.tid = rec.get("tid", 0)
        self.main = bool(rec.get("flags", 0) & 1)
        self.name = rec.get("name") or ("main" if self.main else "")
        self.label = thread_label(rec or None, serial)
        self.start_ns = rec.get("start_ns")
        self.end_ns = rec.get("end_ns")
        self.roots = (process.label, self.label) if split and process is not None else (self.label,)


class Stack:
    """A named stack, interned: equal stacks are the same object (hash by identity, cheap).
    `frames` is root first; `id` is small and dense (0, 1, 2... in order of first use)."""
    __slots__ = ("id", "frames")

    def __init__(self, id: int, frames: Tuple[Frame, ...]):
        self.id = id
        self.frames = frames


_FUNCTION_FRAMES: Dict[Frame, Frame] = {}


def function_frame(f: Frame) -> Frame:
    """The frame without its line (--no-lines): one per function and file (interned)."""
    g = _FUNCTION_FRAMES.get(f)
    if g is None:
        g = Frame(f.label, f.path, 0)
        g.name = f"{f.label} ({f.path})" if f.path else f.label
        g = _FUNCTION_FRAMES.setdefault(g, g)
        _FUNCTION_FRAMES[f] = g
    return g


class Progress:
    """One line on stderr while a long pass runs: looks at the clock only every `every` calls,
    redraws at most 10 times a second, and erases itself at the end. Silent unless stderr is a
    terminal, and for the first half second (short runs never show it)."""

    def __init__(self, total: int, stream=None, every: int = 8, delay_s: float = 0.5):
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = bool(getattr(self.stream, "isatty", lambda: False)())
        self.total = max(total, 1)
        self.done = 0
        self.every = every
        self._calls = 0
        self._start = time.monotonic()
        self._next_draw = self._start + delay_s
        self._drawn = False

    def update(self, n: int) -> None:
        self.done += n
        self._calls += 1
        if not self.enabled or self._calls % self.every:
            return
        now = time.monotonic()
        if now < self._next_draw:
            return
        self._next_draw = now + 0.1
        rate = self.done / max(now - self._start, 1e-9)
        self.stream.write(f"\r\x1b[Ksdb-symbolize: {100.0 * self.done / self.total:5.1f}% "
                          f"({self.done:,} of {self.total:,} samples, {rate:,.0f}/s)")
        self.stream.flush()
        self._drawn = True

    def finish(self) -> None:
        if self._drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._drawn = False


class _Proc:
    """One process of the trace in a pass: its tables, the Resolver of its frames, the stacks whose
    names depend on time, and its named stacks by id."""

    def __init__(self, tables: Tables, labels: str, process: Process):
        self.t = tables
        self.proc = tables.proc
        self.process = process
        self.base = tables.proc << PROC_SHIFT          # a thread or span serial here -> its id in the trace
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


class SamplePass:
    """Streams the samples of one trace into one reporter. A trace of a process tree holds several
    processes, each with its own ids: threads and spans get ids of the trace (Tables.gid), stacks
    are named by their process's Resolver, and each Thread knows its Process.
    `source`: a TraceFile, or a MemoryTrace that kept its samples (anything with `tables` and
    `iter_samples(on_batch, windows, spans, proc)`)."""

    def __init__(self, source: TraceFile, options: ProfileOptions):
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
        self.ctx: Dict[int, _Proc] = {pt.proc: _Proc(pt, options.labels, self.processes[pt.proc]) for pt in procs}
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
        self._interned: Dict[Tuple[Frame, ...], Stack] = {}
        self._state_frames = {st: Frame(f"({name})", None, 0) for st, name in STATE_NAMES.items()}
        self.samples_in = 0    # samples read
        self.samples_out = 0   # samples handed over
        self.samples_unnamed = 0  # of those, samples with a frame no name could be proven for
        self._unnamed: Dict[int, bool] = {}     # Stack.id -> it has such a frame
        self._units: Dict[int, Optional[dict]] = {}     # span id -> its unit of work (the root span)
        self._check_endpoints()

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
        s = self._interned.get(frames)
        if s is None:
            s = self._interned[frames] = Stack(len(self._interned), frames)
        return s

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
            u = self._unnamed[stack.id] = any(f.label.startswith(UNKNOWN_ISEQ_PREFIX) for f in stack.frames)
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

    # ------------------------------------------------------------------ the pass
    def run(self, reporter, progress: Optional[Progress] = None) -> None:
        if getattr(reporter, "wants_idle", False):
            self.idle = True
        if self.uses_spans(reporter):
            self._by_unit(reporter, progress)
        elif getattr(reporter, "timeline", False):
            self._timeline(reporter, progress)
        else:
            self._aggregate(reporter, progress)
        if progress is not None:
            progress.finish()

    def _samples(self, on_batch) -> None:
        """on_batch(c, base, dts, threads, stacks, states, wins[, spans, ticks]) for each batch of a
        process the pass keeps."""
        ctx = self.ctx

        def each(proc, *batch):
            c = ctx.get(proc)
            if c is not None:
                on_batch(c, *batch)
            else:
                self.samples_in += len(batch[1])
        return each

    def _aggregate(self, reporter, progress) -> None:
        by_proc: Dict[_Proc, Counter] = {c: Counter() for c in self.ctx.values()}
        lo, hi = self.lo, self.hi
        timed = lo is not None or hi is not None
        lo_v = lo if lo is not None else -1 << 63
        hi_v = hi if hi is not None else 1 << 63

        def on_batch(c, base, dts, threads, stacks, states, wins):
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
            counts = by_proc[c]
            if whole and (not amb or amb.isdisjoint(stacks)):
                counts.update(zip(threads, stacks, states))   # C loop: the hot path
                return
            for dt, th, sid, st, win in zip(dts, threads, stacks, states, wins):
                t = base + dt
                if t < lo_v or t > hi_v:
                    continue
                counts[(th, self.stack(c, sid, st, t, t - win * 1000) if sid in amb else sid, st)] += 1

        self.source.iter_samples(self._samples(on_batch), windows=True, proc=None)
        for c, counts in by_proc.items():
            for (serial, sid, st), n in counts.items():
                serial |= c.base
                if not self.keep(serial, st):
                    continue
                stack = sid if isinstance(sid, Stack) else self.stack(c, sid, st, 0)
                self.samples_out += n
                if self.has_unnamed(stack):
                    self.samples_unnamed += n
                reporter.add(self.thread(serial), stack, st, None, n)

    def _timeline(self, reporter, progress) -> None:
        lo_v = self.lo if self.lo is not None else -1 << 63
        hi_v = self.hi if self.hi is not None else 1 << 63
        idle, allowed = self.idle, self.allowed
        states = self.o.states
        add = reporter.add
        thread = self.thread

        unnamed = self._unnamed
        threads_of: Dict[int, Thread] = {}

        def on_batch(c, base, dts, threads, stacks, sts, wins):
            self.samples_in += len(dts)
            if progress is not None:
                progress.update(len(dts))
            out = 0
            n_unnamed = 0
            amb, cache, pbase = c.ambiguous, c.by_sid, c.base
            for dt, th, sid, st, win in zip(dts, threads, stacks, sts, wins):
                if st == STATE_BLOCKED and not idle:
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
                add(tobj, stack, st, t, 1)
                out += 1
                u = unnamed.get(stack.id)
                if u is None:
                    u = self.has_unnamed(stack)
                if u:
                    n_unnamed += 1
            self.samples_out += out
            self.samples_unnamed += n_unnamed

        self.source.iter_samples(self._samples(on_batch), windows=True, proc=None)

    def _by_unit(self, reporter, progress) -> None:
        """Either pass, with each sample's unit of work (its span's outermost span): filtered by
        --endpoint and --slower-than, its endpoint as the root frame with --by endpoint, and handed
        to a reporter that wants it (`by_unit`) with `add_unit`."""
        lo_v = self.lo if self.lo is not None else -1 << 63
        hi_v = self.hi if self.hi is not None else 1 << 63
        timeline = getattr(reporter, "timeline", False)
        by_unit = getattr(reporter, "by_unit", False)
        blame = getattr(reporter, "gvl_blame", False)
        groups = getattr(reporter, "groups_units", False)    # it groups by unit itself: no root frame
        counts: Counter = Counter()
        thread = self.thread

        def on_batch(c, base, dts, threads, stacks, sts, wins, spans, ticks):
            self.samples_in += len(dts)
            if progress is not None:
                progress.update(len(dts))
            pbase = c.base
            if pbase:
                threads = [th | pbase for th in threads]
                spans = [sp | pbase if sp else 0 for sp in spans]
            if blame:
                self._blame(reporter, c, base, dts, threads, stacks, sts, wins, spans, ticks)
            for dt, th, sid, st, win, sp in zip(dts, threads, stacks, sts, wins, spans):
                t = base + dt
                if t < lo_v or t > hi_v or not self.keep(th, st):
                    continue
                u = self.unit(sp)
                if not self.unit_kept(u):
                    continue
                if timeline:
                    stack = self.stack(c, sid, st, t, t - win * 1000)
                    if not groups:
                        stack = self.unit_stack(stack, u)
                    self._hand(reporter, thread(th), stack, st, t, 1, u, by_unit)
                else:
                    key = self.stack(c, sid, st, t, t - win * 1000) if sid in c.ambiguous else sid
                    counts[(c, th, key, st, u["span"] if u is not None else 0)] += 1

        self.source.iter_samples(self._samples(on_batch), spans=True, proc=None)
        for (c, serial, sid, st, us), n in counts.items():
            stack = sid if isinstance(sid, Stack) else self.stack(c, sid, st, 0)
            u = self.spans.get(us) if us else None
            self._hand(reporter, thread(serial), stack if groups else self.unit_stack(stack, u), st, None, n, u,
                       by_unit)

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

    def _hand(self, reporter, th, stack, st, t, n, u, by_unit) -> None:
        self.samples_out += n
        if self.has_unnamed(stack):
            self.samples_unnamed += n
        if by_unit:
            reporter.add_unit(th, stack, st, t, n, u)
        else:
            reporter.add(th, stack, st, t, n)


NO_UNIT = "(no request or job)"
_ENDPOINT_FRAMES: Dict[str, Frame] = {}


def endpoint_name(u: Optional[dict]) -> str:
    """What a unit of work is called in outputs: its endpoint; `(no endpoint)` for one the app
    never named (a request still running when the recording ended, before Rails named it)."""
    if u is None:
        return NO_UNIT
    return u["endpoint"] if u["endpoint"] is not None else "(no endpoint)"


def endpoint_frame(u: Optional[dict]) -> Frame:
    name = endpoint_name(u)
    f = _ENDPOINT_FRAMES.get(name)
    if f is None:
        f = _ENDPOINT_FRAMES[name] = Frame(f"[{name}]" if u is not None else name, None, 0)
    return f


_REQUEST_FRAMES: Dict[str, Frame] = {}


def unit_label(u: Optional[dict]) -> str:
    """One unit of work, told apart from the others of its endpoint: `ReportsController#show
    4f1c...` (its request id or jid), or `... span 17` when the app gave it none."""
    if u is None:
        return NO_UNIT
    rid = u["request_id"]
    return f"{endpoint_name(u)} {rid}" if rid else f"{endpoint_name(u)} span {u['span']}"


def request_frame(u: Optional[dict]) -> Frame:
    if u is None:
        return endpoint_frame(None)
    name = unit_label(u)
    f = _REQUEST_FRAMES.get(name)
    if f is None:
        f = _REQUEST_FRAMES[name] = Frame(f"[{name}]", None, 0)
    return f


def state_name(state: int) -> str:
    return STATE_NAMES.get(state, STATE_NAMES[STATE_UNKNOWN])
