"""Names for frames: joins the trace's frames with its symbol records by address and time. The one
naming path: sdb-symbolize, the sidecar's snapshot and top all name frames with a Resolver (the label
rules themselves are labels.py's).

A symbol holds from its `at_ns` until the next symbol for the same address, so an
address reused by a new ISeq never lends its name to samples of the old one.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from sdb_trace import KIND_CFUNC, KIND_GC, KIND_RUBY, KIND_TRUNCATED, Tables

from .labels import GC_LABEL, LABELS_SDB, TRUNCATED_LABEL, full_label, method_fits, names_its_method, qualified_name


UNKNOWN_ISEQ_PREFIX = "(unknown ISeq 0x"     # the label of a Ruby frame no name could be proven for


class Frame:
    __slots__ = ("name", "label", "path", "line", "located_at_caller", "cfunc")

    def __init__(self, label: str, path: Optional[str], line: int, located_at_caller: bool = False,
                 cfunc: bool = False):
        self.located_at_caller = located_at_caller
        self.cfunc = cfunc
        self.label = label
        self.path = path
        self.line = line
        self.name = (f"{label} ({path}:{line})" if line else f"{label} ({path})") if path else label

    def __eq__(self, other):
        return isinstance(other, Frame) and self.name == other.name

    def __hash__(self):
        return hash(self.name)


class Resolver:
    def __init__(self, tables: Tables, labels: str = LABELS_SDB):
        self.t = tables
        self.labels = labels        # LABELS_SDB (`block in Foo#bar`) or LABELS_RUBY (`Foo#bar`)
        self._static: Dict[int, Optional[Tuple[Frame, ...]]] = {}
        self._frames_of: Optional[Dict[int, List[int]]] = None     # ISeq address -> its Ruby frames
        self._agreed: Dict[Tuple[int, int], Optional[dict]] = {}
        # (frame id, caller Frame) -> Frame: a frame's name depends on nothing else unless its address
        # was named twice (time-dependent). Interned, a 10,000-deep recursion holds a few Frames, not
        # one per position of every stack.
        self._interned: Dict[Tuple[int, Optional[Frame]], Optional[Frame]] = {}
        # True when the caller knows no name depends on time (no address named twice, no eBPF
        # pause: SamplePass checks the finished tables once): no frame is then asked about it
        self.static_names = False
        # False: a stack whose names depend on nothing else is not kept here once named (a caller
        # that keeps its named stacks itself, compactly: SamplePass for the tree formats)
        self.keep_stacks = True
        self._mark = names_mark(tables)
        self._frames_seen = len(tables.frame_kind)

    def still_holds(self) -> bool:
        """For a Resolver kept while its Tables grow (the sidecar's push names each interval with the
        tables read so far): whether every name it cached still holds. Tables only grow, and a
        frame's or a stack's ids never change meaning, so a cached name depends on nothing else
        than the symbol tables (a new symbol can name an unnamed address or make an address
        time-dependent), the eBPF pauses (names before a pause stop holding) and, for a frame whose
        method was agreed among its ISeq's frames, that ISeq's frames: if the symbols or pauses
        changed, or a new frame belongs to an ISeq an agreement was asked of, nothing is kept
        (False: make a new Resolver); other new frames only reset the lazy ISeq -> frames index."""
        if names_mark(self.t) != self._mark:
            return False
        n = len(self.t.frame_kind)
        if n != self._frames_seen:
            asked = {iseq for iseq, _ in self._agreed}
            if asked and any(self.t.frame_iseq[fid] in asked for fid in range(self._frames_seen, n)):
                return False
            self._frames_of = None
            self._frames_seen = n
        return True

    def agreed_method(self, iseq: int, sym, t_ns: int) -> Optional[dict]:
        """For a frame of this ISeq (symbol `sym`) whose own method entry does not fit it: a frame read
        while the stack moved can carry another frame's entry, or none. If the entries of every other
        frame of this ISeq that fit it name one method, that is the frame's method (a method's ISeq
        belongs to that method); if they name several (an alias in a subclass), or none, None."""
        key = (iseq, id(sym))
        if key in self._agreed:
            return self._agreed[key]
        if self._frames_of is None:
            self._frames_of = {}
            for fid, kind in enumerate(self.t.frame_kind):
                if kind == KIND_RUBY and self.t.frame_me[fid]:
                    self._frames_of.setdefault(self.t.frame_iseq[fid], []).append(fid)
        names: Dict[str, dict] = {}
        for me in {self.t.frame_me[fid] for fid in self._frames_of.get(iseq, ())}:
            msym = self.t.symbol_at(self.t.cfuncs, me, t_ns)
            if msym is not None and method_fits(sym.record, msym.record):
                names.setdefault(qualified_name(msym.record), msym.record)
        self._agreed[key] = next(iter(names.values())) if len(names) == 1 else None
        return self._agreed[key]

    def _ambiguous(self, fid: int) -> bool:
        kind = self.t.frame_kind[fid]
        if kind == KIND_RUBY:
            syms = self.t.iseqs.get(self.t.frame_iseq[fid], ())
            # named by time: several names, or a name an eBPF pause ends (one written before it)
            if len(syms) > 1 or (syms and self.t.ebpf_pauses and syms[0].at_ns < self.t.ebpf_pauses[-1][0]):
                return True
        return len(self.t.cfuncs.get(self.t.frame_me[fid], ())) > 1

    def frame(self, fid: int, t_ns: int, caller: Optional[Frame], lo_ns: Optional[int] = None) -> Optional[Frame]:
        """Labels as rb_profile_frame_full_label (sdb_trace.full_label): the frame's ISeq symbol
        and its method entry's `method` symbol, each the one holding at t_ns (and, with lo_ns,
        the whole time from lo_ns to t_ns in which the sample's frames were copied)."""
        kind = self.t.frame_kind[fid]
        if kind == KIND_RUBY or kind == KIND_CFUNC:
            me = self.t.frame_me[fid]
            msym = self.t.symbol_at(self.t.cfuncs, me, t_ns, lo_ns) if me else None
            method = msym.record if msym is not None else None
        if kind == KIND_RUBY:
            iseq = self.t.frame_iseq[fid]
            sym = self.t.symbol_at(self.t.iseqs, iseq, t_ns, lo_ns)
            if sym is None:
                return Frame(f"{UNKNOWN_ISEQ_PREFIX}{iseq:x})", None, 0)
            if not method_fits(sym.record, method) and names_its_method(sym.record):
                method = self.agreed_method(iseq, sym, t_ns) or method
            if sym.record.get("c_trace"):
                # a built-in Ruby method Ruby's backtrace shows as a C method: at its caller
                return Frame(full_label(KIND_RUBY, sym.record, method, self.labels), caller.path if caller else None,
                             caller.line if caller else 0, located_at_caller=True)
            # a frame of pc 0 is one YJIT pushed whose pc was not its own: no line, not the def's
            return Frame(full_label(KIND_RUBY, sym.record, method, self.labels), sym.path,
                         self.t.frame_line[fid] or (sym.first_line if self.t.frame_pc[fid] else 0))
        if kind == KIND_CFUNC:
            # like Ruby's backtrace: a C function is located at its Ruby caller
            return Frame(full_label(KIND_CFUNC, None, method), caller.path if caller else None,
                         caller.line if caller else 0, located_at_caller=True, cfunc=True)
        if kind == KIND_TRUNCATED:
            return Frame(TRUNCATED_LABEL, None, 0)
        if kind == KIND_GC:
            return Frame(GC_LABEL, None, 0)
        return None  # KIND_OTHER: not shown, as in Ruby's own backtraces

    def stack(self, sid: int, t_ns: int, lo_ns: Optional[int] = None) -> Tuple[Frame, ...]:
        """The named frames of a stack at time t (copied between lo_ns and t), root first."""
        cached = self._static.get(sid, False)
        if cached is not False and cached is not None:
            return cached
        fids = self.t.stacks[sid]
        out: List[Frame] = []
        caller = None
        interned = self._interned
        static_names = self.static_names
        kinds = self.t.frame_kind
        for fid in reversed(fids):
            key = (fid, caller)
            f = interned.get(key, False)
            if f is False:
                f = self.frame(fid, t_ns, caller, lo_ns)
                if static_names or not self._ambiguous(fid):
                    interned[key] = f
            if f is None:
                continue
            if kinds[fid] == KIND_RUBY and not f.located_at_caller:
                caller = f
            out.append(f)
        result = tuple(out)
        if cached is False:
            static = static_names or not any(self._ambiguous(fid) for fid in fids)
            self._static[sid] = result if static and self.keep_stacks else None
        return result


def names_mark(tables: Tables) -> tuple:
    """What a frame's name depends on besides its own frame record that can grow: how many
    symbols each table holds (symbols are only ever added) and the eBPF pauses (an open one may
    close). Equal marks: equal symbol tables and pauses."""
    return (sum(map(len, tables.iseqs.values())), sum(map(len, tables.cfuncs.values())),
            tuple(tuple(p) for p in tables.ebpf_pauses))


def thread_label(th: Optional[dict], serial: int) -> str:
    if th is None:
        return f"thread {serial}"
    name = th.get("name") or ("main" if th.get("flags", 0) & 1 else "")
    return f"thread {name} (tid {th.get('tid')})" if name else f"thread {serial} (tid {th.get('tid')})"
