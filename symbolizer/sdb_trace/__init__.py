"""The sdb trace format: the one package that writes and reads `trace.msgpack` (writer.py, reader.py,
tables.py; the names every part shares are here).

The format is specified in docs/trace-format.md. The sidecar writes with
`TraceWriter`; every reading tool goes through `TraceReader` (records one by
one) or `load_tables` + `iter_samples` (the symbolizer's two streaming passes).
"""
from __future__ import annotations


__version__ = "0.1.0"   # sdb's version, for every Python package (pyproject.toml reads it here); the gem's is gem/lib/sdb/version.rb
MAGIC = "sdb-trace"
VERSION = 4            # 2: several processes in one trace (`process`, `in`, `process_end` records);
                       # 3: the records after the header may be one zstd stream;
                       # 4: samples carry a sample type and a value (header `sample_types`, sample_types.py)
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
# The format's own enums (docs/trace-format.md): an iseq record's `type` and a method record's
# `type` are an index in these lists (-1: unknown). The sidecar maps the running Ruby's values to
# them through its layout row; no Ruby number is written here.
ISEQ_TYPES = ("top", "method", "block", "class", "rescue", "ensure", "eval", "main", "plain")
METHOD_TYPES = ("iseq", "cfunc", "attrset", "ivar", "bmethod", "zsuper", "alias", "undef",
                "notimplemented", "optimized", "missing", "refined")
ISEQ_TYPE_METHOD = ISEQ_TYPES.index("method")
ISEQ_TYPE_BLOCK = ISEQ_TYPES.index("block")
ISEQ_TYPE_RESCUE = ISEQ_TYPES.index("rescue")
ISEQ_TYPE_ENSURE = ISEQ_TYPES.index("ensure")
METHOD_ISEQ = METHOD_TYPES.index("iseq")
METHOD_CFUNC = METHOD_TYPES.index("cfunc")

# A sample's thread state is the registry's (the gem's, or the sidecar's on Ruby 3.1), as written
from .registry_h import (SDB_STATE_BLOCKED as STATE_BLOCKED, SDB_STATE_GVL_WAIT as STATE_GVL_WAIT,  # noqa: E402
                         SDB_STATE_RUNNING as STATE_RUNNING, SDB_STATE_UNKNOWN as STATE_UNKNOWN)
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



# the format's parts, one module each (the names above come first: they import them)
from .sample_types import SampleType, sample_types_of, time_sample_types  # noqa: E402,F401
from .reader import TraceReader, check_record, int_column, plain_bytes  # noqa: E402,F401
from .tables import (SPAN_BEGIN, SPAN_END, SPAN_KINDS, SYMBOL_RECORDS, Symbol, Tables, TraceFile,  # noqa: E402,F401
                     has_record, iter_samples, load_tables, samples_so_far)
from .writer import MemoryTrace, ProcessWriter, TraceWriteError, TraceWriter  # noqa: E402,F401
