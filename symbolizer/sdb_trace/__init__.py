"""The sdb trace format: the one module that writes and reads `trace.msgpack`.

The format is specified in docs/trace-format.md. The sidecar writes with
`TraceWriter`; every reading tool goes through `TraceReader` (records one by
one) or `load_tables` + `iter_samples` (the symbolizer's two streaming passes).
"""
from __future__ import annotations

import bisect
import math
import os
import threading
from array import array
from dataclasses import dataclass, field
from typing import IO, Callable, Dict, Iterator, List, Optional, Tuple

import msgpack

__version__ = "0.1.0"   # sdb's version, for every Python package (pyproject.toml reads it here); the gem's is gem/lib/sdb/version.rb
MAGIC = "sdb-trace"
VERSION = 3            # 2: several processes in one trace (`process`, `in`, `process_end` records);
                       # 3: the records after the header may be one zstd stream
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
ZSTD_LEVEL = 3          # ~2.8 bytes a sample on a Rails app's trace (benchmarks/RESULTS.md, trace_size)

# A trace may hold several processes (a process tree: a puma master and its workers). Each has its
# own ids (thread serials, frame, stack and span ids, addresses); records after an `in` record belong
# to its process until the next one; before any, to process 0 (the header's). Readers that mix
# processes give a thread or span of process p the global id `p << PROC_SHIFT | its own id`, which
# leaves process 0's ids as they are.
PROC_SHIFT = 32
PROC_MAX = (1 << 31) - 1

KIND_RUBY = 0
KIND_CFUNC = 1
KIND_OTHER = 2
KIND_TRUNCATED = 3
KIND_GC = 4        # the thread was collecting garbage: "(garbage collection)", innermost
METHOD_ISEQ = 0    # method record `type`: rb_method_type_t (VM_METHOD_TYPE_ISEQ, CFUNC, ...)
METHOD_CFUNC = 1
ISEQ_TYPE_METHOD = 1   # iseq record `type`: rb_iseq_type (docs/trace-format.md)
ISEQ_TYPE_BLOCK = 2
ISEQ_TYPE_RESCUE = 4
ISEQ_TYPE_ENSURE = 5

STATE_UNKNOWN = 0
STATE_RUNNING = 1
STATE_GVL_WAIT = 2
STATE_BLOCKED = 3
STATE_NAMES = {STATE_UNKNOWN: "unknown", STATE_RUNNING: "running",
               STATE_GVL_WAIT: "waiting for GVL", STATE_BLOCKED: "blocked"}


class TraceError(Exception):
    """A trace that cannot be read (fully). `str()` is the one-line message."""


class NotATrace(TraceError):
    pass


class NewerVersion(TraceError):
    pass


class Truncated(TraceError):
    pass


class Corrupt(TraceError):
    pass


# --------------------------------------------------------------------- writer
class TraceWriteError(OSError):
    """The trace could not be written (a full disk, an I/O error, a closed pipe). The file holds
    every record written before, whole: the writer cut it back to the end of its last good batch."""


class TraceWriter:
    """Appends records to an open binary file; flushes after every batch.

    batched: records are gathered in memory and written at `flush()` (once per batch: the sidecar's
    file is unbuffered); else each record is written as it comes. compress: the records after the
    header go through one zstd stream, each write a whole block the reader can decode however the
    file ends (`end` closes the frame). If a write fails, the file is truncated back to the end of
    the last batch flushed whole (so it ends between two records and reads as a recording cut
    short), `TraceWriteError` is raised once, and every later record is dropped (so code cleaning
    up after the failure does not fail again)."""

    def __init__(self, out: IO[bytes], header: dict, batched: bool = False, compress: bool = True):
        self._out = out
        self._packer = msgpack.Packer(unicode_errors="replace")
        self._buf = bytearray()
        self._batched = batched
        self._sent = 0                      # bytes handed to the file
        self.written = 0                    # bytes of whole batches written and flushed
        self.failed: Optional[OSError] = None
        self._proc = 0                      # the process the records written now belong to
        self.lock = threading.RLock()       # held by a ProcessWriter while it writes (one thread per process)
        self._z = None
        rec = {"t": "header", "magic": MAGIC, "version": VERSION}
        rec.update(header)
        self.start_mono_ns = rec.get("start_mono_ns")
        self._write(rec)
        self.flush()
        if compress and out is not None:
            import zstandard
            self._z = zstandard.ZstdCompressor(level=ZSTD_LEVEL).compressobj()
            self._zflush = zstandard.COMPRESSOBJ_FLUSH_BLOCK
            self._zfinish = zstandard.COMPRESSOBJ_FLUSH_FINISH

    def _write(self, rec: dict) -> None:
        self._put(self._packer.pack(rec))

    def _put(self, data: bytes) -> None:
        self._buf += data
        if not self._batched:
            self._send()

    def _send(self, finish: bool = False) -> None:
        if self.failed is not None:
            self._buf.clear()
            return
        if self._z is not None and (self._buf or finish):
            raw = bytes(self._buf)
            self._buf.clear()
            self._buf += self._z.compress(raw) + self._z.flush(self._zfinish if finish else self._zflush)
            if finish:
                self._z = None
        n = len(self._buf)
        data = memoryview(self._buf)
        try:
            while data:
                done = self._out.write(data)
                data = data[done if done is not None else len(data):]
        except OSError as e:
            self._fail(e)
        finally:
            data.release()
            self._buf.clear()
        self._sent += n

    def _fail(self, e: OSError) -> None:
        self.failed = e
        try:
            os.ftruncate(self._out.fileno(), self.written)
        except (OSError, AttributeError, ValueError):
            pass                            # a pipe or a device: nothing to cut back
        raise TraceWriteError(e.errno, e.strerror) from None

    def enter(self, proc: int) -> None:
        """The records written from now on belong to process `proc` (an `in` record when it changes)."""
        if proc != self._proc:
            self._write({"t": "in", "proc": proc})
            self._proc = proc

    def for_process(self, proc: int) -> "ProcessWriter":
        """A writer whose records all belong to process `proc` (each Drainer of a process tree has one)."""
        return ProcessWriter(self, proc)

    def process(self, proc: int, pid: int, ppid: int, parent: int, command: List[str], at_ns: int,
                **extra) -> None:
        """A process of the trace (process 0's is the header's; it may have one too): what it is, and
        from when it is recorded. A later one for the same `proc` updates it (a new process title)."""
        rec = {"t": "process", "proc": proc, "pid": pid, "ppid": ppid, "parent": parent, "command": command,
               "at_ns": at_ns}
        rec.update(extra)
        self._write(rec)

    def process_end(self, proc: int, at_ns: int, reason: str, **counts) -> None:
        rec = {"t": "process_end", "proc": proc, "at_ns": at_ns, "reason": reason}
        rec.update(counts)
        self._write(rec)

    def thread(self, serial: int, tid: int, name: str, start_ns: int, flags: int, at_ns: int) -> None:
        self._write({"t": "thread", "serial": serial, "tid": tid, "name": name,
                     "start_ns": start_ns, "flags": flags, "at_ns": at_ns})

    def thread_end(self, serial: int, at_ns: int) -> None:
        self._write({"t": "thread_end", "serial": serial, "at_ns": at_ns})

    def frames(self, first_id: int, kind: List[int], iseq: List[int], pc: List[int], me: List[int],
               line: List[int]) -> None:
        self._write({"t": "frames", "first_id": first_id, "kind": kind, "iseq": iseq, "pc": pc, "me": me,
                     "line": line})

    def stacks(self, first_id: int, stacks: List[List[int]]) -> None:
        self._write({"t": "stacks", "first_id": first_id, "stacks": stacks})

    def samples(self, base_ns: int, dt_ns: List[int], thread: List[int], stack: List[int], state: List[int],
                win_us: Optional[List[int]] = None, span: Optional[List[int]] = None,
                tick: Optional[List[int]] = None) -> None:
        rec = {"t": "samples", "base_ns": base_ns, "dt_ns": dt_ns, "thread": thread, "stack": stack, "state": state}
        if win_us is not None:
            rec["win_us"] = win_us
        if span is not None:
            rec["span"] = span
        if tick is not None:
            rec["tick"] = tick
        self._write(rec)

    def encoded(self, record: bytes) -> None:
        """A record someone else already encoded as msgpack (the sampler encodes its sample batches)."""
        self._put(record)

    def iseq(self, addr: int, label: str, base_label: str, path: str, realpath: Optional[str],
             first_line: int, type: int, at_ns: int, source: str = "remote", **extra) -> None:
        rec = {"t": "iseq", "addr": addr, "label": label, "base_label": base_label, "path": path,
               "realpath": realpath, "first_line": first_line, "type": type, "at_ns": at_ns,
               "source": source}
        rec.update(extra)
        self._write(rec)

    def cfunc(self, me: int, name: Optional[str], at_ns: int, source: str = "remote") -> None:
        self._write({"t": "cfunc", "me": me, "name": name, "at_ns": at_ns, "source": source})

    def method(self, me: int, name: Optional[str], type: int, class_path: Optional[str], singleton: bool,
               at_ns: int, source: str = "remote") -> None:
        self._write({"t": "method", "me": me, "name": name, "type": type, "class_path": class_path,
                     "singleton": bool(singleton), "at_ns": at_ns, "source": source})

    def spans(self, what: List[int], span: List[int], parent: List[int], thread: List[int], at_ns: List[int],
              kind: List[int], endpoint: List[Optional[str]], status: List[int],
              request_id: List[Optional[str]]) -> None:
        self._write({"t": "spans", "what": what, "span": span, "parent": parent, "thread": thread, "at_ns": at_ns,
                     "kind": kind, "endpoint": endpoint, "status": status, "request_id": request_id})

    def ebpf_pause(self, at_ns: int, rate: int, backoff_s: float) -> None:
        self._write({"t": "ebpf_pause", "at_ns": at_ns, "rate": rate, "backoff_s": backoff_s})

    def ebpf_resume(self, at_ns: int) -> None:
        self._write({"t": "ebpf_resume", "at_ns": at_ns})

    def ebpf_attached(self, at_ns: int, attach: str) -> None:
        self._write({"t": "ebpf_attached", "at_ns": at_ns, "attach": attach})

    def end(self, **counts) -> None:
        self.enter(0)
        rec = {"t": "end"}
        rec.update(counts)
        self._write(rec)
        self.flush(finish=True)

    def flush(self, finish: bool = False) -> None:
        self._send(finish)
        if self.failed is not None:
            return
        try:
            self._out.flush()
        except OSError as e:
            self._fail(e)
        self.written = self._sent


class ProcessWriter:
    """The records of one process of a trace, written into the trace's one TraceWriter: each record
    method enters the process first (TraceWriter.enter), under the writer's lock (each process of a
    tree is drained by a thread of its own). Everything else is the writer's."""

    RECORDS = frozenset(("thread", "thread_end", "frames", "stacks", "samples", "encoded", "iseq", "cfunc",
                         "method", "spans", "ebpf_pause", "ebpf_resume", "ebpf_attached"))

    def __init__(self, writer: TraceWriter, proc: int):
        self.writer = writer
        self.proc = proc

    def __getattr__(self, name):
        attr = getattr(self.writer, name)
        if name == "flush":
            lock = self.writer.lock

            def flush():
                with lock:
                    return attr()
            return flush
        if name not in self.RECORDS:
            return attr
        proc, enter, lock = self.proc, self.writer.enter, self.writer.lock

        def write(*args, **kwargs):
            with lock:              # another process's thread writes between two records, never inside one
                enter(proc)
                return attr(*args, **kwargs)
        return write


# ----------------------------------------------------------------- validation
# Every field a reader uses is checked for its type and range as its record is read (check_record),
# so a damaged or hostile trace ends in Corrupt (one line), never in an exception deeper down.
# Messages name the field and the type found, never the value (which may be huge or deeply nested).
_I64 = 1 << 63
_U64 = 1 << 64


def _int(v) -> bool:
    return type(v) is int and -_I64 <= v < _I64


def _u64(v) -> bool:
    return type(v) is int and 0 <= v < _U64


def _nonneg(v) -> bool:
    return type(v) is int and 0 <= v < _I64


def _number(v) -> bool:
    return (type(v) is int or type(v) is float) and math.isfinite(v) and abs(v) < 1e18


def _rate(v) -> bool:
    return _number(v) and 1e-3 <= v <= 1e9


def _str(v) -> bool:
    return type(v) is str


def _str_or_none(v) -> bool:
    return v is None or type(v) is str


def _bool(v) -> bool:
    return type(v) is bool


def _str_list(v) -> bool:
    return type(v) is list and all(type(x) is str for x in v)


def _map_or_none(v) -> bool:
    return v is None or type(v) is dict


def _proc(v) -> bool:
    return type(v) is int and 0 <= v <= PROC_MAX


_WHAT = {_int: "an integer", _u64: "an unsigned 64-bit integer", _nonneg: "a non-negative integer",
         _number: "a finite number", _rate: "a rate in Hz (0.001 to 1e9)", _str: "a string",
         _str_or_none: "a string or nil", _bool: "a boolean", _str_list: "a list of strings",
         _map_or_none: "a map or nil", _proc: f"a process index (0 to {PROC_MAX})"}

# record type -> {key: (check, required)}; unknown keys are ignored, unknown record types skipped
_SCHEMA = {
    "header": {"magic": (_str, True), "version": (_int, True), "max_depth": (_nonneg, False), "pid": (_int, False),
               "ruby": (_str, False), "ruby_description": (_str, False), "layout": (_str, False),
               "rate_hz": (_rate, False), "start_mono_ns": (_int, False), "start_wall_ns": (_int, False),
               "hostname": (_str, False), "sdb_version": (_str, False), "command": (_str_list, False)},
    "in": {"proc": (_proc, True)},
    "process": {"proc": (_proc, True), "pid": (_int, False), "ppid": (_int, False), "parent": (_int, False),
                "command": (_str_list, False), "at_ns": (_int, False), "ns_pid": (_int, False),
                "ruby": (_str, False), "ruby_description": (_str, False), "layout": (_str, False)},
    "process_end": {"proc": (_proc, True), "at_ns": (_int, False), "reason": (_str, False)},
    "thread": {"serial": (_int, True), "tid": (_int, False), "name": (_str, True), "start_ns": (_int, False),
               "flags": (_int, False), "at_ns": (_int, False)},
    "thread_end": {"serial": (_int, True), "at_ns": (_int, False)},
    "frames": {"first_id": (_nonneg, True)},
    "stacks": {"first_id": (_nonneg, True)},
    "samples": {"base_ns": (_int, True)},
    "iseq": {"addr": (_u64, True), "label": (_str, False), "base_label": (_str, False), "path": (_str, False),
             "realpath": (_str_or_none, False), "first_line": (_int, False), "type": (_int, False),
             "at_ns": (_int, False), "source": (_str, False), "c_trace": (_bool, False), "moved_from": (_u64, False)},
    "method": {"me": (_u64, True), "name": (_str_or_none, False), "type": (_int, False),
               "class_path": (_str_or_none, False), "singleton": (_bool, False), "at_ns": (_int, False),
               "source": (_str, False)},
    "cfunc": {"me": (_u64, True), "name": (_str_or_none, False), "at_ns": (_int, False), "source": (_str, False)},
    "ebpf_pause": {"at_ns": (_int, True), "rate": (_number, False), "backoff_s": (_number, False)},
    "ebpf_resume": {"at_ns": (_int, True)},
    "ebpf_attached": {"at_ns": (_int, True), "attach": (_str, False)},
    "end": {"at_ns": (_int, False), "reason": (_str, False), "ticks": (_int, False), "late": (_int, False),
            "missed": (_int, False), "samples": (_int, False), "torn": (_int, False), "retried": (_int, False),
            "reused": (_int, False), "errors": (_int, False), "threads": (_int, False), "yjit_no_line": (_int, False),
            "span_unsure": (_int, False), "spans_lost": (_int, False), "endpoints_refused": (_int, False),
            "symbol_errors": (_int, False), "ebpf": (_map_or_none, False), "threads_from": (_str, False),
            "names_superseded": (_int, False), "names_unproven": (_int, False), "unnamed": (_map_or_none, False)},
}


def _kind(v) -> str:
    return "nil" if v is None else type(v).__name__


def check_record(rec: dict) -> Optional[str]:
    """None if every field this reader uses has its documented type and range; else what is wrong,
    in a few words (no value quoted)."""
    t = rec["t"]
    for key, (check, required) in _SCHEMA.get(t, {}).items():
        if key not in rec:
            if required:
                return f"a {t} record without {key!r}"
            continue
        if not check(rec[key]):
            return f"a {t} record's {key!r} is {_kind(rec[key])}, expected {_WHAT[check]}"
    return None


def int_column(rec: dict, key: str, typecode: str = "q") -> array:
    """A record's column as an array of integers (typecode q: signed 64-bit, Q: unsigned); Corrupt-worthy
    problems raise ValueError with what is wrong."""
    col = rec.get(key)
    if type(col) is not list:
        raise ValueError(f"a {rec['t']} record's {key!r} is {_kind(col)}, expected a list of integers")
    try:
        return array(typecode, col)         # a C loop: rejects anything but integers in range
    except TypeError:
        raise ValueError(f"a {rec['t']} record's {key!r} holds something other than integers") from None
    except OverflowError:
        raise ValueError(f"a {rec['t']} record's {key!r} holds an integer out of range") from None

# --------------------------------------------------------------------- reader
_CHUNK = 1 << 20


class TraceReader:
    """Reads a trace record by record.

    `header` is read on construction (NotATrace / NewerVersion raised there).
    `records()` yields every complete record after the header; problems found
    later (Truncated, Corrupt) are raised only after every good record before
    them has been yielded, so callers lose nothing already recorded.
    """

    def __init__(self, path: str):
        self.path = path
        try:
            self._f = open(path, "rb")
        except OSError as e:
            raise TraceError(f"cannot open {path}: {e.strerror}") from None
        self.size = os.fstat(self._f.fileno()).st_size
        self.complete = False  # set once an `end` record has been read
        self.end: Optional[dict] = None
        self._zd = None        # the records' zstd stream (version 3), decoded as read
        self._fed = 0          # bytes handed to the unpacker so far
        self._unpacker = self._new_unpacker()
        first = self._next()
        if (first is None or not isinstance(first, dict) or first.get("t") != "header"
                or first.get("magic") != MAGIC):
            raise NotATrace(f"{path}: not an sdb trace")
        version = first.get("version")
        if not isinstance(version, int) or version < 1:
            raise Corrupt(f"{path}: corrupt header (version {version!r})")
        if version > VERSION:
            raise NewerVersion(f"{path}: written by a newer sdb (format {version}; this one reads up to "
                               f"{VERSION}): upgrade sdb")
        why = check_record(first)
        if why:
            raise Corrupt(f"{path}: corrupt header ({why})")
        self.header = first
        self.offset = 0          # where the record last yielded by records() starts
        # the records after the header: plain msgpack (byte offsets in messages are the file's), or
        # (version 3) one zstd stream (offsets are then those of the records as decompressed)
        if version >= 3:
            here = self._f.tell()
            self._f.seek(self._unpacker.tell())
            peek = self._f.read(4)
            compressed = bool(peek) and ZSTD_MAGIC.startswith(peek)    # (a file cut inside the magic too)
            self._f.seek(here)
            if compressed:
                try:
                    import zstandard
                except ImportError:
                    raise TraceError(f"{path} is compressed (zstd) and the zstandard Python module is missing: "
                                     f"pip install zstandard") from None
                self._zerror = zstandard.ZstdError
                self._zd = zstandard.ZstdDecompressor().decompressobj()
                self._zmod = zstandard
                self._f.seek(self._unpacker.tell())
                self._unpacker = self._new_unpacker()
                self._fed = 0

    @staticmethod
    def _new_unpacker():
        return msgpack.Unpacker(raw=False, unicode_errors="replace", strict_map_key=False, max_buffer_size=0)

    def close(self) -> None:
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _chunk(self, start: int) -> bytes:
        """The next bytes of the records (decoded), b"" at the end of the file."""
        raw = self._f.read(_CHUNK)
        if self._zd is None or not raw:
            return raw
        out = []
        try:
            while raw:
                out.append(self._zd.decompress(raw))
                raw = self._zd.unused_data if self._zd.eof else b""
                if raw:     # another frame follows the one that ended
                    self._zd = self._zmod.ZstdDecompressor().decompressobj()
        except self._zerror as e:
            raise Corrupt(f"{self.path}: corrupt compressed data after record byte {start} ({e})") from None
        return b"".join(out)

    def _next(self):
        """The next object, None at a clean end of file; raises Truncated/Corrupt."""
        start = self._unpacker.tell()  # where this record starts (tell() moves inside a partial one)
        while True:
            try:
                return self._unpacker.unpack()
            except msgpack.OutOfData:
                chunk = self._chunk(start)
                if not chunk:
                    if start < self._fed:
                        raise Truncated(f"{self.path}: truncated at byte {start} "
                                        f"(the file ends inside a record)") from None
                    return None
                self._fed += len(chunk)
                self._unpacker.feed(chunk)
            except (msgpack.FormatError, msgpack.StackError, ValueError, TypeError) as e:
                raise Corrupt(f"{self.path}: corrupt at byte {start} ({e})") from None

    def records(self) -> Iterator[dict]:
        while True:
            offset = self._unpacker.tell()
            rec = self._next()
            if rec is None:
                return
            if not isinstance(rec, dict) or not isinstance(rec.get("t"), str):
                raise Corrupt(f"{self.path}: corrupt at byte {offset} (a record that is not a map with \"t\")")
            why = check_record(rec)
            if why:
                raise Corrupt(f"{self.path}: corrupt at byte {offset} ({why})")
            self.offset = offset
            if rec["t"] == "end":
                self.complete = True
                self.end = rec
            yield rec


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


def _check_samples(reader: TraceReader, rec: dict, nstacks: int) -> int:
    """Validates a samples record against the stacks defined so far; returns its sample count."""
    try:
        cols = [int_column(rec, c) for c in _SAMPLE_COLUMNS]
        cols += [int_column(rec, c, "L") for c in _SAMPLE_OPTIONAL if c in rec]    # win_us: unsigned
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


SPAN_BEGIN, SPAN_END = 1, 2
SPAN_KINDS = {1: "request", 2: "job", 3: "label"}


def _spans(where: str, tables: "Tables", rec: dict) -> None:
    """A spans record into tables.spans: serial -> {"span", "parent", "thread", "kind", "begin_ns",
    "end_ns", "endpoint", "status", "request_id"} (None where the trace has no record of it)."""
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
    for i in range(n):
        sp = tables.spans.get(span[i])
        if sp is None:
            sp = tables.spans[span[i]] = {"span": span[i], "parent": 0, "thread": 0, "kind": 0, "begin_ns": None,
                                          "end_ns": None, "endpoint": None, "status": 0, "request_id": None}
        if what[i] == SPAN_BEGIN:
            sp.update(parent=parent[i], thread=thread[i], kind=kind[i], begin_ns=at_ns[i])
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
    for st in stacks:
        try:
            ids = array("I", st) if type(st) is list else None   # 4 bytes a frame: deep stacks stay small
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
        try:
            for rec in reader.records():
                t = rec["t"]
                if t == "samples":
                    cur = tables._cur
                    n = _check_samples(reader, rec, len(cur.stacks))
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
                 windows: bool = False, spans: bool = False, proc: Optional[int] = 0) -> None:
    """Second pass: calls on_batch(base_ns, dt_ns, thread, stack, state) for each batch, in order;
    with `windows`, also each sample's copy window in us (`win_us`; 0s for traces without it);
    with `spans`, also its span and its tick (0s for traces without them).
    `proc`: only the batches of that process (its own thread serials and stack ids; 0: the
    header's, the only one of most traces); None: every process's, each call with the process
    first: on_batch(proc, base_ns, ...).
    `limit`: how many sample records to hand over (Tables.good_sample_records: the ones the
    first pass found sound, every process's); stops quietly at the first unreadable record."""
    n = 0
    cur = 0
    with TraceReader(path) as reader:
        try:
            for rec in reader.records():
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
                if proc is None:
                    on_batch(cur, *args)
                else:
                    on_batch(*args)
        except (Truncated, Corrupt):
            return


class MemoryTrace(TraceWriter):
    """A TraceWriter that writes no file: each record goes into `tables` (Tables.apply) as it is
    written, the samples to `on_samples`. The sidecar's snapshot and top run the recorder's Drainer
    into one and name frames from its tables as sdb-symbolize names them from a file's."""

    def __init__(self, header: dict):
        self.tables = Tables(header={})
        super().__init__(None, header)

    def _write(self, rec: dict) -> None:
        if rec["t"] == "samples":
            self.on_samples(rec)
        else:
            self.tables.take(rec, "the sidecar's records")

    @property
    def proc(self) -> int:
        """The process the records written now belong to (an on_samples record's)."""
        return self.tables._cur.proc

    def encoded(self, record: bytes) -> None:
        self._write(msgpack.unpackb(record))

    def flush(self) -> None:
        pass

    def on_samples(self, rec: dict) -> None:
        """A samples record (base_ns, dt_ns, thread, stack, state): for the subclass to count."""


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
