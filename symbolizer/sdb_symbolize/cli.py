"""sdb-symbolize: names the frames of a raw trace and writes a profile.

Errors become one line on stderr and an exit code here, and only here; whatever the
trace holds before a problem is still written out."""
from __future__ import annotations

import argparse
import os
import sys

from sdb_trace import Corrupt, NewerVersion, TraceError, Truncated, load_tables

from . import __version__
from .reporters import REPORTERS
from .samples import FilterError, Options, Progress, SamplePass


class Exit:
    OK = 0
    FAILED = 1
    USAGE = 2
    NO_TRACE = 20        # missing or unreadable file, or not a trace
    NEWER = 21           # a newer format version
    TRUNCATED = 22       # ends inside a record: output holds everything before it
    CORRUPT = 23         # a bad record: output holds everything before it
    OUTPUT = 24          # the output path cannot be written


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sdb-symbolize", description="Name the frames of an sdb trace and write "
                                "a profile.")
    p.add_argument("trace", help="trace file written by sdb-sidecar (trace.msgpack)")
    p.add_argument("--format", "-f", default="collapsed", choices=sorted(REPORTERS),
                   help="output format (default collapsed)")
    p.add_argument("-o", "--output", default="-", help="output file (default: standard output)")
    p.add_argument("--idle", action=argparse.BooleanOptionalAction, default=False,
                   help="keep samples of blocked threads (sleep, IO, locks, queues); default: drop them, "
                        "as py-spy does")
    p.add_argument("--states", action="store_true",
                   help="put each sample's thread state (running, waiting for GVL, blocked) as its root frame")
    p.add_argument("--thread", action="append", metavar="NAME|ID",
                   help="only this thread: its name, Linux thread id or serial (repeatable)")
    p.add_argument("--from", dest="from_s", type=float, metavar="SECONDS",
                   help="only samples taken at least this long after the recording started")
    p.add_argument("--to", dest="to_s", type=float, metavar="SECONDS",
                   help="only samples taken at most this long after the recording started")
    p.add_argument("--no-lines", dest="lines", action="store_false",
                   help="aggregate by function: frames without their line")
    p.add_argument("--no-progress", dest="progress", action="store_false",
                   help="no progress line on stderr (it shows only on a terminal, for long runs)")
    p.add_argument("--version", action="version", version=f"sdb {__version__}")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except TraceError as e:
        sys.stderr.write(f"sdb-symbolize: error: {e}\n")
        return _code(e)
    except BrokenPipeError:
        return Exit.FAILED


def _code(e: TraceError) -> int:
    if isinstance(e, Truncated):
        return Exit.TRUNCATED
    if isinstance(e, Corrupt):
        return Exit.CORRUPT
    if isinstance(e, NewerVersion):
        return Exit.NEWER
    return Exit.NO_TRACE


def run(args) -> int:
    if not os.path.isfile(args.trace):
        raise TraceError(f"{args.trace}: no such file")
    tables = load_tables(args.trace)
    reporter = REPORTERS[args.format](tables.header, args)
    reporter.end_ns = tables.end.get("at_ns") if tables.end else None
    try:
        samples = SamplePass(args.trace, tables, Options.from_args(args))
    except FilterError as e:
        sys.stderr.write(f"sdb-symbolize: error: {e}\n")
        return Exit.USAGE
    try:
        out = sys.stdout if args.output == "-" else (open(args.output, "wb") if reporter.binary else open(args.output, "w", encoding="utf-8"))
    except OSError as e:
        sys.stderr.write(f"sdb-symbolize: error: cannot write {args.output}: {e.strerror}\n")
        return Exit.OUTPUT
    stream = out.buffer if reporter.binary and out is sys.stdout else out
    try:
        reporter.start(stream)
        samples.run(reporter, Progress(tables.sample_count) if args.progress else None)
        reporter.render(stream)
    finally:
        if out is not sys.stdout:
            out.close()
        else:
            out.flush()
    if tables.error is None and samples.samples_in and not samples.samples_out:
        sys.stderr.write(f"sdb-symbolize: warning: none of the {samples.samples_in} samples match the filters "
                         f"(--thread, --from/--to, --idle)\n")
    if tables.error is not None:
        sys.stderr.write(f"sdb-symbolize: error: {tables.error} ({tables.sample_count} samples before it "
                         f"were written)\n")
        return _code(tables.error)
    if tables.end is None:
        sys.stderr.write(f"sdb-symbolize: warning: {args.trace}: recording was cut short (no end record); "
                         f"{tables.sample_count} samples written\n")
    return Exit.OK


if __name__ == "__main__":
    sys.exit(main())
