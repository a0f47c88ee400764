"""Names for frames: joins the trace's frames with its symbol records by address and time.

A symbol holds from its `at_ns` until the next symbol for the same address, so an
address reused by a new ISeq never lends its name to samples of the old one.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from sdb_trace import KIND_CFUNC, KIND_OTHER, KIND_RUBY, KIND_TRUNCATED, Tables


class Frame:
    __slots__ = ("name", "label", "path", "line")

    def __init__(self, label: str, path: Optional[str], line: int):
        self.label = label
        self.path = path
        self.line = line
        self.name = f"{label} ({path}:{line})" if path else label

    def __eq__(self, other):
        return isinstance(other, Frame) and self.name == other.name

    def __hash__(self):
        return hash(self.name)


class Resolver:
    def __init__(self, tables: Tables):
        self.t = tables
        self._static: Dict[int, Optional[Tuple[Frame, ...]]] = {}

    def _ambiguous(self, fid: int) -> bool:
        kind = self.t.frame_kind[fid]
        if kind == KIND_RUBY:
            return len(self.t.iseqs.get(self.t.frame_iseq[fid], ())) > 1
        if kind == KIND_CFUNC:
            return len(self.t.cfuncs.get(self.t.frame_me[fid], ())) > 1
        return False

    def frame(self, fid: int, t_ns: int, caller: Optional[Frame]) -> Optional[Frame]:
        kind = self.t.frame_kind[fid]
        if kind == KIND_RUBY:
            iseq = self.t.frame_iseq[fid]
            sym = self.t.symbol_at(self.t.iseqs, iseq, t_ns)
            if sym is None:
                return Frame(f"(unknown ISeq 0x{iseq:x})", None, 0)
            return Frame(sym.label, sym.path, self.t.frame_line[fid] or sym.first_line)
        if kind == KIND_CFUNC:
            sym = self.t.symbol_at(self.t.cfuncs, self.t.frame_me[fid], t_ns)
            name = sym.label if sym is not None and sym.label else "(C function)"
            # like Ruby's backtrace: a C function is located at its Ruby caller
            return Frame(name, caller.path if caller else None, caller.line if caller else 0)
        if kind == KIND_TRUNCATED:
            return Frame("(truncated)", None, 0)
        return None  # KIND_OTHER: not shown, as in Ruby's own backtraces

    def stack(self, sid: int, t_ns: int) -> Tuple[Frame, ...]:
        """The named frames of a stack at time t, root first."""
        cached = self._static.get(sid, False)
        if cached is not False and cached is not None:
            return cached
        fids = self.t.stacks[sid]
        out: List[Frame] = []
        caller = None
        for fid in reversed(fids):
            f = self.frame(fid, t_ns, caller)
            if f is None:
                continue
            if self.t.frame_kind[fid] == KIND_RUBY:
                caller = f
            out.append(f)
        result = tuple(out)
        if cached is False:
            static = not any(self._ambiguous(fid) for fid in fids)
            self._static[sid] = result if static else None
        return result


def thread_label(th: Optional[dict], serial: int) -> str:
    if th is None:
        return f"thread {serial}"
    name = th.get("name") or ("main" if th.get("flags", 0) & 1 else "")
    return f"thread {name} (tid {th.get('tid')})" if name else f"thread {serial} (tid {th.get('tid')})"
