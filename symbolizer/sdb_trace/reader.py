"""Reading a trace record by record, every field a reader uses checked as its record is read."""
from __future__ import annotations

import math
import os
from array import array
from typing import Iterator, Optional

import msgpack

from . import MAGIC, PROC_MAX, VERSION, ZSTD_MAGIC, Corrupt, NewerVersion, NotATrace, TraceError, Truncated
from .sample_types import check_sample_types


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
               "hostname": (_str, False), "sdb_version": (_str, False), "command": (_str_list, False),
               "container_id": (_str, False), "pod_uid": (_str, False), "service": (_str, False)},
    "in": {"proc": (_proc, True)},
    "process": {"proc": (_proc, True), "pid": (_int, False), "ppid": (_int, False), "parent": (_int, False),
                "command": (_str_list, False), "at_ns": (_int, False), "ns_pid": (_int, False),
                "ruby": (_str, False), "ruby_description": (_str, False), "layout": (_str, False),
                "service": (_str, False)},
    "process_end": {"proc": (_proc, True), "at_ns": (_int, False), "reason": (_str, False)},
    "thread": {"serial": (_int, True), "tid": (_int, False), "name": (_str, True), "start_ns": (_int, False),
               "flags": (_int, False), "at_ns": (_int, False)},
    "thread_end": {"serial": (_int, True), "at_ns": (_int, False)},
    "frames": {"first_id": (_nonneg, True)},
    "stacks": {"first_id": (_nonneg, True)},
    "samples": {"base_ns": (_int, True)},
    "iseq": {"addr": (_u64, True), "label": (_str, False), "base_label": (_str, False), "path": (_str, False),
             "realpath": (_str_or_none, False), "first_line": (_int, False), "type": (_int, False),
             "at_ns": (_int, False), "source": (_str, False), "c_trace": (_bool, False), "moved_from": (_u64, False),
             "refused": (_str, False)},
    "method": {"me": (_u64, True), "name": (_str_or_none, False), "type": (_int, False),
               "class_path": (_str_or_none, False), "singleton": (_bool, False), "at_ns": (_int, False),
               "source": (_str, False)},
    "cfunc": {"me": (_u64, True), "name": (_str_or_none, False), "at_ns": (_int, False), "source": (_str, False)},
    "ebpf_pause": {"at_ns": (_int, True), "rate": (_number, False), "backoff_s": (_number, False)},
    "ebpf_resume": {"at_ns": (_int, True)},
    "ebpf_attached": {"at_ns": (_int, True), "attach": (_str, False)},
    "kernel_view": {"at_ns": (_int, True)},
    "end": {"at_ns": (_int, False), "reason": (_str, False), "ticks": (_int, False), "late": (_int, False),
            "missed": (_int, False), "samples": (_int, False), "torn": (_int, False), "retried": (_int, False),
            "reused": (_int, False), "errors": (_int, False), "threads": (_int, False), "yjit_no_line": (_int, False), "in_context": (_int, False), "in_context_since_ns": (_int, False),
            "in_context_untimed": (_int, False), "zjit_frames": (_int, False), "zjit_unread": (_int, False),
            "pauses_seen": (_int, False), "span_unsure": (_int, False), "spans_lost": (_int, False), "endpoints_refused": (_int, False),
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
    if t == "header" and "sample_types" in rec:
        return check_sample_types(rec["sample_types"])
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
_ZCHUNK = 1 << 15     # compressed bytes read at a time: ~10x that decoded on real traces


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
        """The next bytes of the records (decoded), b"" at the end of the file. Compressed, it takes
        _ZCHUNK bytes of the file at a time: what one call hands over stays small, however well the
        records compress (a synthetic trace of 10 M samples decoded 1 MiB into 100s of MiB at once);
        a piece that ends inside a zstd block decodes to nothing yet: the next one is read then."""
        if self._zd is None:
            return self._f.read(_CHUNK)
        while True:
            raw = self._f.read(_ZCHUNK)
            if not raw:
                return b""
            out = []
            try:
                while raw:
                    out.append(self._zd.decompress(raw))
                    raw = self._zd.unused_data if self._zd.eof else b""
                    if raw:     # another frame follows the one that ended
                        self._zd = self._zmod.ZstdDecompressor().decompressobj()
            except self._zerror as e:
                raise Corrupt(f"{self.path}: corrupt compressed data after record byte {start} ({e})") from None
            data = b"".join(out)
            if data:
                return data

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


def plain_bytes(path: str) -> bytes:
    """The trace at `path` with its records as plain msgpack (a compressed one decompressed): the same
    trace, as a reader of format 2 would find its bytes (tests cut and damage them; benchmarks count
    what compression saves)."""
    with open(path, "rb") as f:
        data = f.read()
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, max_buffer_size=0)
    unpacker.feed(data)
    unpacker.unpack()
    head = unpacker.tell()
    if data[head:head + 4] != ZSTD_MAGIC:
        return data
    import zstandard
    return data[:head] + zstandard.ZstdDecompressor().decompressobj().decompress(data[head:])
