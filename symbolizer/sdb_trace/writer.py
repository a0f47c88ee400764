"""Writing a trace: TraceWriter (the sidecar's, and the tests'), a process's view of it in a tree
(ProcessWriter), and MemoryTrace (records into Tables, no file: snapshot, top)."""
from __future__ import annotations

import os
import threading
from typing import IO, Callable, List, Optional

import msgpack

from . import MAGIC, VERSION, ZSTD_LEVEL
from .sample_types import time_sample_types
from .tables import Tables, hand_samples


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
    up after the failure does not fail again). tap: called with each record's msgpack bytes as it
    is written, before compression, from the header on (the sidecar's --push reads the stream)."""

    def __init__(self, out: IO[bytes], header: dict, batched: bool = False, compress: bool = True,
                 tap: Optional[Callable[[bytes], None]] = None):
        self._out = out
        self.tap = tap
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
        if "sample_types" not in rec:        # a time recording's: wall, and cpu (running threads)
            rec["sample_types"] = time_sample_types(rec.get("rate_hz"))
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
        if self.tap is not None:
            self.tap(data)
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
        rec.update((k, v) for k, v in extra.items() if v is not None)    # None: not known, key left out
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
                tick: Optional[List[int]] = None, type: int = 0, value: Optional[List[int]] = None) -> None:
        """One batch of samples of sample type `type` (an index in the header's `sample_types`;
        absent from the record when 0), each weighing its `value` (absent: the type's fixed one)."""
        rec = {"t": "samples", "base_ns": base_ns, "dt_ns": dt_ns, "thread": thread, "stack": stack, "state": state}
        if win_us is not None:
            rec["win_us"] = win_us
        if span is not None:
            rec["span"] = span
        if tick is not None:
            rec["tick"] = tick
        if type:
            rec["type"] = type
        if value is not None:
            rec["value"] = value
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
              request_id: List[Optional[str]], trace_id: Optional[List[Optional[str]]] = None,
              span_id: Optional[List[Optional[str]]] = None) -> None:
        rec = {"t": "spans", "what": what, "span": span, "parent": parent, "thread": thread, "at_ns": at_ns,
               "kind": kind, "endpoint": endpoint, "status": status, "request_id": request_id}
        if trace_id and any(t is not None for t in trace_id):    # only a record with a traced span has them
            rec["trace_id"], rec["span_id"] = trace_id, span_id
        self._write(rec)

    def ebpf_pause(self, at_ns: int, rate: int, backoff_s: float) -> None:
        self._write({"t": "ebpf_pause", "at_ns": at_ns, "rate": rate, "backoff_s": backoff_s})

    def ebpf_resume(self, at_ns: int) -> None:
        self._write({"t": "ebpf_resume", "at_ns": at_ns})

    def ebpf_attached(self, at_ns: int, attach: str) -> None:
        self._write({"t": "ebpf_attached", "at_ns": at_ns, "attach": attach})

    def kernel_view(self, at_ns: int) -> None:
        self._write({"t": "kernel_view", "at_ns": at_ns})

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
                         "method", "spans", "ebpf_pause", "ebpf_resume", "ebpf_attached", "kernel_view"))

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



class MemoryTrace(TraceWriter):
    """A TraceWriter that writes no file: each record goes into `tables` (Tables.take) as it is
    written, the samples to `on_samples`. The sidecar's snapshot and top run the recorder's Drainer
    into one and name frames from its tables as sdb-symbolize names them from a file's.

    keep_samples: the sample records are kept too (with `in` records saying whose they are), so the
    trace is a source of samples as a TraceFile is (`tables`, `iter_samples`): sdb_symbolize renders
    a profile from it with no file. Each record is stored as a reader of the file would find it (a
    msgpack round trip: tuples become lists, text that is not UTF-8 is replaced alike), so both give
    the same profile, byte for byte."""

    def __init__(self, header: dict, keep_samples: bool = False):
        self.tables = Tables(header={})
        self.kept: Optional[List[dict]] = [] if keep_samples else None
        self._kept_proc = 0
        super().__init__(None, header)

    @staticmethod
    def _unpack(data: bytes):
        return msgpack.unpackb(data, raw=False, unicode_errors="replace", strict_map_key=False)

    def _write(self, rec: dict) -> None:
        if rec["t"] == "samples":
            proc = self.count_samples(len(rec["stack"]))
            if self.kept is not None:
                if proc != self._kept_proc:
                    self.kept.append({"t": "in", "proc": proc})
                    self._kept_proc = proc
                self.kept.append(rec)
            self.on_samples(rec)
        else:
            self.tables.take(self._unpack(self._packer.pack(rec)), "the sidecar's records")

    def count_samples(self, n: int) -> int:
        """A samples record of n samples written now (counted as a file's reader counts them; the
        push keeps its samples apart, sdb_sidecar.push.cutter): the process it belongs to."""
        tables = self.tables
        tables._cur.process_samples += n
        tables.sample_count += n
        tables.good_sample_records += 1
        return tables._cur.proc

    @property
    def proc(self) -> int:
        """The process the records written now belong to (an on_samples record's)."""
        return self.tables._cur.proc

    def encoded(self, record: bytes) -> None:
        self._write(self._unpack(record))

    def flush(self, finish: bool = False) -> None:
        pass

    def on_samples(self, rec: dict) -> None:
        """A samples record (base_ns, dt_ns, thread, stack, state): for the subclass to count."""

    def iter_samples(self, on_batch: Callable[..., None], windows: bool = False, spans: bool = False,
                     proc: Optional[int] = 0, values: bool = False) -> None:
        """The kept samples, as TraceFile.iter_samples hands a file's (keep_samples only)."""
        if self.kept is None:
            raise ValueError("this MemoryTrace keeps no samples (keep_samples=False)")
        hand_samples(self.kept, on_batch, None, windows, spans, proc, self.tables.typed, values)
