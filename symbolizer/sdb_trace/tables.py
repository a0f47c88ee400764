"""The two streaming passes a reading tool makes over a trace: load_tables (everything but the
samples: threads, frames, stacks, symbols, spans, processes) and iter_samples."""
from __future__ import annotations

import bisect
from array import array
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Tuple

from . import METHOD_CFUNC, PROC_SHIFT, Corrupt, TraceError, Truncated
from .reader import _I64, TraceReader, _kind, int_column
from .sample_types import SampleType, sample_types_of
from .registry_h import SDB_KIND_JOB, SDB_KIND_LABEL, SDB_KIND_REQUEST, SDB_SPAN_BEGIN, SDB_SPAN_END


# ------------------------------------------------------------- tables + samples
@dataclass
class Symbol:
    at_ns: int
    label: str
    path: str
    first_line: int
    source: str
    record: dict


@dataclass
class Tables:
    """Everything but the samples: the first streaming pass."""
    header: dict
    threads: Dict[int, dict] = field(default_factory=dict)
    frame_kind: List[int] = field(default_factory=list)
    frame_iseq: List[int] = field(default_factory=list)
    frame_pc: List[int] = field(default_factory=list)
    frame_me: List[int] = field(default_factory=list)
    frame_line: List[int] = field(default_factory=list)
    stacks: List[List[int]] = field(default_factory=list)
    iseqs: Dict[int, List[Symbol]] = field(default_factory=dict)  # addr -> symbols by time
    cfuncs: Dict[int, List[Symbol]] = field(default_factory=dict)  # method entry -> `method` symbols
    end: Optional[dict] = None
    ebpf_pauses: List[List[Optional[int]]] = field(default_factory=list)  # [start_ns, end_ns or None]
    spans: Dict[int, dict] = field(default_factory=dict)  # span serial -> its begin and end (Span keys)
    sample_count: int = 0               # the trace's samples, every process's (on process 0's Tables)
    good_sample_records: int = 0        # its sound sample records, every process's (likewise)
    error: Optional[TraceError] = None  # a Truncated/Corrupt met after the good records
    proc: int = 0                       # which process of the trace these are (0: the header's)
    process: Optional[dict] = None      # its `process` record (the latest), None: none written
    process_end: Optional[dict] = None  # its `process_end` record, None: none (recorded to the end)
    process_samples: int = 0            # its own samples
    procs: Dict[int, "Tables"] = field(default_factory=dict)  # process 0's: every process's Tables
    _cur: Optional["Tables"] = None     # process 0's: the process the records read now belong to

    def __post_init__(self):
        if self.proc == 0:
            self.procs[0] = self
            self._cur = self

    def take(self, rec: dict, where: str) -> "Tables":
        """Process 0's Tables take in any record but `samples`: an `in`, `process` or `process_end`
        record here, any other by the Tables of the process it belongs to. Returns that process's
        Tables (for a samples record: whose it is)."""
        t = rec["t"]
        if t == "in":
            self._cur = self.of_process(rec["proc"])
        elif t == "process":
            self.of_process(rec["proc"]).process = rec
        elif t == "process_end":
            self.of_process(rec["proc"]).process_end = rec
        elif t == "end" or t == "header":
            self.apply(rec, where)          # the trace's own, whichever process came last
        elif t != "samples":
            self._cur.apply(rec, where)
        return self._cur

    def of_process(self, proc: int) -> "Tables":
        tables = self.procs.get(proc)
        if tables is None:
            tables = self.procs[proc] = Tables(header=self.header, proc=proc)
        return tables

    @property
    def sample_types(self) -> List[SampleType]:
        """The recording's sample types (its header's: sdb_trace.sample_types_of)."""
        cached = self.__dict__.get("_types")
        if cached is None or cached[0] is not self.header:
            cached = self.__dict__["_types"] = (self.header, sample_types_of(self.header))
        return cached[1]

    @property
    def typed(self) -> bool:
        """Its samples records may carry a `type` and a `value` (format 4 on)."""
        return (self.header.get("version") or 0) >= 4

    def gid(self, serial: int) -> int:
        """A thread or span serial of this process as a global id of the trace (PROC_SHIFT)."""
        return serial if self.proc == 0 else (self.proc << PROC_SHIFT) | serial

    @property
    def pid(self) -> int:
        p = self.process or {}
        return p.get("pid", self.header.get("pid", 0) if self.proc == 0 else 0)

    @property
    def command(self) -> List[str]:
        p = self.process or {}
        return p.get("command") or (self.header.get("command") or [] if self.proc == 0 else [])

    def apply(self, rec: dict, where: str) -> None:
        """Takes in one record other than `samples` (checked: Corrupt names `where`, the trace's
        path). Every reader that builds Tables goes through here: load_tables from a file, the
        sidecar's MemoryTrace from its own Drainer (snapshot, top)."""
        t = rec["t"]
        if t == "frames":
            _check_ids(where, rec, len(self.frame_kind), "frames")
            _frames(where, self, rec)
        elif t == "stacks":
            _check_ids(where, rec, len(self.stacks), "stacks")
            _stacks(where, self, rec)
        elif t == "thread":
            rec.pop("names", None)             # both are this reader's own keys
            rec.pop("end_ns", None)
            prev = self.threads.get(rec["serial"])
            if prev is not None:
                rec = dict(rec, names=prev.get("names", [prev["name"]]) + [rec["name"]])
            self.threads[rec["serial"]] = rec
        elif t == "thread_end":
            th = self.threads.get(rec.get("serial"))
            if th is not None:
                th["end_ns"] = rec.get("at_ns")
        elif t in SYMBOL_RECORDS:
            table, addr, sym = self.symbol_of(rec)
            _insert_symbol(table, addr, sym)
        elif t == "spans":
            _spans(where, self, rec)
        elif t == "ebpf_pause":
            self.ebpf_pauses.append([rec["at_ns"], None])
        elif t == "ebpf_resume":
            if self.ebpf_pauses and self.ebpf_pauses[-1][1] is None:
                self.ebpf_pauses[-1][1] = rec["at_ns"]
        elif t == "end":
            self.end = rec
        elif t == "header":
            self.header = rec

    def symbol_of(self, rec: dict) -> Tuple[Dict[int, List[Symbol]], int, Symbol]:
        """For an `iseq`, `method` or older `cfunc` record: the table it belongs in, its address
        there, and its Symbol. Every reader of symbol records builds them here."""
        if rec["t"] == "iseq":
            return self.iseqs, rec["addr"], Symbol(rec.get("at_ns", 0), rec.get("label") or "",
                                                   rec.get("path") or "", rec.get("first_line") or 0,
                                                   rec.get("source", ""), rec)
        if rec["t"] == "cfunc":       # the older record: a C method's name only
            rec = dict(rec, type=METHOD_CFUNC, class_path=None, singleton=False)
        return self.cfuncs, rec["me"], Symbol(rec.get("at_ns", 0), rec.get("name") or "", "", 0,
                                              rec.get("source", ""), rec)

    def symbol_at(self, table: Dict[int, List[Symbol]], addr: int, t: int, lo: Optional[int] = None) \
            -> Optional[Symbol]:
        """The symbol for `addr` holding at time `t`: the latest one from at or before `t`.
        An address named once has that name at every time: the sidecar writes a symbol for each
        address when a sample first shows it, valid from the earliest moment that sample's frames
        may have been copied, so no sample of it is older. An address named several times (an ISeq
        freed and its address reused, a GC move) is resolved by time, and strictly: None when no
        symbol is that old, or when `lo` is given (the sample's frames were copied somewhere in
        [lo, t]) and a symbol starts inside (lo, t]: the frame may show what the address meant
        before or after it, so neither name is proven.
        An ISeq name written before an eBPF pause started does not hold after that start: births
        went unseen from then, and one at this address could have taken its instructions' memory
        too (the sidecar names every ISeq anew once it knows of the pause): None then."""
        syms = table.get(addr)
        if not syms:
            return None
        if len(syms) == 1:
            best = syms[0]
        else:
            best = None
            for s in syms:
                if s.at_ns > t:
                    break
                if lo is not None and s.at_ns > lo:
                    return None
                best = s
        if best is not None and self.ebpf_pauses and table is self.iseqs:
            start = self.pause_start_before(t)
            if start is not None and best.at_ns < start:
                return None
        return best

    def pause_start_before(self, t: int) -> Optional[int]:
        """The start of the last eBPF pause that started at or before t (None: none did)."""
        i = bisect.bisect_right(self.ebpf_pauses, t, key=lambda p: p[0])
        return self.ebpf_pauses[i - 1][0] if i else None


def _check_ids(where: str, rec: dict, expected: int, what: str) -> None:
    if rec.get("first_id") != expected:       # an int: check_record made sure
        raise Corrupt(f"{where}: corrupt {what} record (first_id {rec.get('first_id')}, "
                      f"expected {expected})")


SYMBOL_RECORDS = ("iseq", "method", "cfunc")
_FRAME_COLUMNS = ("kind", "iseq", "pc", "me")
_SAMPLE_COLUMNS = ("dt_ns", "thread", "stack", "state")
_SAMPLE_OPTIONAL = ("win_us", "span", "tick")


def _check_samples(reader: TraceReader, rec: dict, nstacks: int, types: Optional[List[SampleType]] = None) -> int:
    """Validates a samples record against the stacks defined so far (and, from format 4, against
    the header's sample types: `types`); returns its sample count."""
    try:
        cols = [int_column(rec, c) for c in _SAMPLE_COLUMNS]
        cols += [int_column(rec, c, "L") for c in _SAMPLE_OPTIONAL if c in rec]    # win_us: unsigned
        if types is not None:
            typ = rec.get("type", 0)
            if type(typ) is not int or not 0 <= typ < len(types) or types[typ].of is not None:
                raise ValueError("its 'type' is not a written sample type of the header")
            if "value" in rec:
                cols.append(int_column(rec, "value"))
            elif types[typ].value is None:
                raise ValueError("no 'value' column for a sample type without a fixed value")
    except ValueError as e:
        raise Corrupt(f"{reader.path}: corrupt samples record ({e})") from None
    n = len(cols[0])
    if any(len(c) != n for c in cols):
        raise Corrupt(f"{reader.path}: corrupt samples record (columns of different lengths)")
    if n and (max(cols[2]) >= nstacks or min(cols[2]) < 0):
        raise Corrupt(f"{reader.path}: corrupt samples record (names a stack that is not defined)")
    if n and not (-_I64 <= rec["base_ns"] + min(cols[0]) and rec["base_ns"] + max(cols[0]) < _I64):
        raise Corrupt(f"{reader.path}: corrupt samples record (a time out of range)")
    return n


def _frames(where: str, tables: "Tables", rec: dict) -> None:
    try:
        kind = int_column(rec, "kind")
        cols = [int_column(rec, c, "Q") for c in ("iseq", "pc", "me")]
        line = int_column(rec, "line") if rec.get("line") is not None else None
    except ValueError as e:
        raise Corrupt(f"{where}: corrupt frames record ({e})") from None
    n = len(kind)
    if any(len(c) != n for c in cols):
        raise Corrupt(f"{where}: corrupt frames record (columns of different lengths)")
    tables.frame_kind.extend(kind)
    tables.frame_iseq.extend(cols[0])
    tables.frame_pc.extend(cols[1])
    tables.frame_me.extend(cols[2])
    tables.frame_line.extend(line if line is not None and len(line) == n else [0] * n)


SPAN_BEGIN, SPAN_END = SDB_SPAN_BEGIN, SDB_SPAN_END       # the registry's span events, as the sidecar copies them
SPAN_KINDS = {SDB_KIND_REQUEST: "request", SDB_KIND_JOB: "job", SDB_KIND_LABEL: "label"}


_HEX = frozenset("0123456789abcdef")


def _id_column(where: str, rec: dict, key: str, n: int, digits: int) -> list:
    """A spans record's trace_id or span_id column: n entries, each None or `digits` lowercase hex
    digits (absent in traces of older sidecars, and in records without a traced span: all None)."""
    col = rec.get(key)
    if col is None:
        return [None] * n
    if (type(col) is not list or len(col) != n
            or not all(v is None or type(v) is str and len(v) == digits and _HEX.issuperset(v) for v in col)):
        raise Corrupt(f"{where}: corrupt spans record ({key} is not a column of {digits}-digit hex ids)")
    return col


def _spans(where: str, tables: "Tables", rec: dict) -> None:
    """A spans record into tables.spans: serial -> {"span", "parent", "thread", "kind", "begin_ns",
    "end_ns", "endpoint", "status", "request_id", "trace_id", "span_id"} (None where the trace has no
    record of it)."""
    try:
        what, span, parent, thread, at_ns, kind, status = (int_column(rec, c, "Q") for c in
                                                           ("what", "span", "parent", "thread", "at_ns", "kind",
                                                            "status"))
    except ValueError as e:
        raise Corrupt(f"{where}: corrupt spans record ({e})") from None
    endpoint, request_id = rec.get("endpoint"), rec.get("request_id")
    n = len(what)
    if (any(len(c) != n for c in (span, parent, thread, at_ns, kind, status))
            or type(endpoint) is not list or type(request_id) is not list or len(endpoint) != n
            or len(request_id) != n or not all(v is None or type(v) is str for v in endpoint + request_id)):
        raise Corrupt(f"{where}: corrupt spans record (columns of different lengths or types)")
    trace_id, span_id = _id_column(where, rec, "trace_id", n, 32), _id_column(where, rec, "span_id", n, 16)
    for i in range(n):
        sp = tables.spans.get(span[i])
        if sp is None:
            sp = tables.spans[span[i]] = {"span": span[i], "parent": 0, "thread": 0, "kind": 0, "begin_ns": None,
                                          "end_ns": None, "endpoint": None, "status": 0, "request_id": None,
                                          "trace_id": None, "span_id": None}
        if what[i] == SPAN_BEGIN:
            sp.update(parent=parent[i], thread=thread[i], kind=kind[i], begin_ns=at_ns[i])
            if trace_id[i] is not None and span_id[i] is not None:     # a link needs both
                sp.update(trace_id=trace_id[i], span_id=span_id[i])
            if endpoint[i] is not None and sp["endpoint"] is None:
                sp["endpoint"] = endpoint[i]
        elif what[i] == SPAN_END:
            sp.update(end_ns=at_ns[i], status=status[i], request_id=request_id[i])
            if not sp["thread"]:
                sp.update(parent=parent[i], thread=thread[i], kind=kind[i])   # began before the trace
            if endpoint[i] is not None:
                sp["endpoint"] = endpoint[i]     # the end's name is the final one (Rails: the action)


def _stacks(where: str, tables: "Tables", rec: dict) -> None:
    stacks = rec.get("stacks")
    if type(stacks) is not list:
        raise Corrupt(f"{where}: corrupt stacks record ('stacks' is {_kind(stacks)}, expected a list)")
    nframes = len(tables.frame_kind)
    code = "H" if nframes <= 1 << 16 else "I"   # 2 or 4 bytes a frame: deep stacks stay small
    for st in stacks:
        try:
            ids = array(code, st) if type(st) is list else None   # an id past the type: not defined
        except (TypeError, OverflowError):
            ids = None
        if ids is None or (ids and max(ids) >= nframes):
            raise Corrupt(f"{where}: corrupt stacks record (names a frame that is not defined)")
        tables.stacks.append(ids)


def load_tables(path: str) -> Tables:
    """First pass: threads, frames, stacks and symbols; counts and checks the samples.
    A damaged record ends the pass: `error` says what, and `good_sample_records` how many
    sample records before it are sound (iter_samples stops there too)."""
    with TraceReader(path) as reader:
        tables = Tables(header=reader.header)
        types = tables.sample_types if tables.typed else None
        try:
            for rec in reader.records():
                t = rec["t"]
                if t == "samples":
                    cur = tables._cur
                    n = _check_samples(reader, rec, len(cur.stacks), types)
                    cur.process_samples += n
                    tables.sample_count += n
                    tables.good_sample_records += 1
                else:
                    tables.take(rec, reader.path)
        except (Truncated, Corrupt) as e:
            tables.error = e
        except (KeyError, TypeError, AttributeError, ValueError, OverflowError) as e:
            tables.error = Corrupt(f"{path}: corrupt at byte {reader.offset} ({type(e).__name__}: {str(e)[:80]})")
    return tables


def _insert_symbol(table: Dict[int, List[Symbol]], addr: int, sym: Symbol) -> None:
    lst = table.setdefault(addr, [])
    lst.append(sym)
    if len(lst) > 1 and lst[-2].at_ns > sym.at_ns:
        lst.sort(key=lambda s: s.at_ns)


def iter_samples(path: str, on_batch: Callable[..., None], limit: Optional[int] = None,
                 windows: bool = False, spans: bool = False, proc: Optional[int] = 0, values: bool = False) -> None:
    """Second pass: calls on_batch(base_ns, dt_ns, thread, stack, state) for each batch, in order;
    with `windows`, also each sample's copy window in us (`win_us`; 0s for traces without it);
    with `spans`, also its span and its tick (0s for traces without them);
    with `values`, last, the batch's sample type (an index in Tables.sample_types: 0 before
    format 4) and its `value` column (None: each sample weighs its type's fixed value). Without
    `values`, batches of every sample type are handed alike.
    `proc`: only the batches of that process (its own thread serials and stack ids; 0: the
    header's, the only one of most traces); None: every process's, each call with the process
    first: on_batch(proc, base_ns, ...).
    `limit`: how many sample records to hand over (Tables.good_sample_records: the ones the
    first pass found sound, every process's); stops quietly at the first unreadable record."""
    with TraceReader(path) as reader:
        try:
            hand_samples(reader.records(), on_batch, limit, windows, spans, proc,
                         values and (reader.header.get("version") or 0) >= 4, values)
        except (Truncated, Corrupt):
            return


def hand_samples(records: Iterable[dict], on_batch: Callable[..., None], limit: Optional[int] = None,
                 windows: bool = False, spans: bool = False, proc: Optional[int] = 0, typed: bool = True,
                 values: bool = False) -> None:
    """iter_samples over records in order (`in` and `samples` records count, others are skipped):
    a file's (TraceReader.records) or those a MemoryTrace kept. `typed`: the records may carry
    `type` and `value` (format 4; before, such keys are not the format's and are ignored)."""
    n = 0
    cur = 0
    for rec in records:
        t = rec["t"]
        if t == "in":
            cur = rec["proc"]
            continue
        if t != "samples":
            continue
        if limit is not None and n >= limit:
            return
        n += 1
        if proc is not None and cur != proc:
            continue
        args = [rec["base_ns"], rec["dt_ns"], rec["thread"], rec["stack"], rec["state"]]
        if spans or windows:
            zeros = None
            for key in (("win_us", "span", "tick") if spans else ("win_us",)):
                col = rec.get(key)
                if not col:
                    col = zeros = zeros or [0] * len(rec["dt_ns"])
                args.append(col)
        if values:
            if typed:
                args += (rec.get("type", 0), rec.get("value"))
            else:
                args += (0, None)
        if proc is None:
            on_batch(cur, *args)
        else:
            on_batch(*args)


class TraceFile:
    """A trace file as a source of samples: its tables (load_tables, on construction: TraceError
    when it cannot be read at all) and its samples (`iter_samples`, the second pass). A MemoryTrace
    that keeps its samples is the other source; sdb_symbolize renders either."""

    def __init__(self, path: str):
        self.path = path
        self.tables = load_tables(path)

    def iter_samples(self, on_batch: Callable[..., None], windows: bool = False, spans: bool = False,
                     proc: Optional[int] = 0, values: bool = False) -> None:
        iter_samples(self.path, on_batch, limit=self.tables.good_sample_records, windows=windows, spans=spans,
                     proc=proc, values=values)


def samples_so_far(path: str) -> int:
    """The samples in a trace, possibly still being written, among its complete records (0 while it
    cannot be read yet)."""
    n = 0
    try:
        with TraceReader(path) as reader:
            try:
                for rec in reader.records():
                    if rec["t"] == "samples":
                        n += len(rec["stack"])
            except TraceError:
                pass
    except (TraceError, OSError):
        return 0
    return n


def has_record(path: str, t: str) -> bool:
    """A trace, possibly still being written, holds a record of type t among its complete records
    (False when it cannot be read yet)."""
    try:
        with TraceReader(path) as reader:
            try:
                return any(rec["t"] == t for rec in reader.records())
            except TraceError:
                return False
    except (TraceError, OSError):
        return False

