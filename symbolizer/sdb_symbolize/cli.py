"""sdb-symbolize: names the frames of a raw trace and writes a profile.

Errors become one line on stderr and an exit code here, and only here; whatever the
trace holds before a problem is still written out."""
from __future__ import annotations

import argparse
import errno
import os
import sys

from sdb_trace import Corrupt, NewerVersion, TraceError, Truncated, load_tables
from sdb_trace.output import open_output, printable

from . import __version__
from .labels import LABEL_CONVENTIONS, LABELS_SDB
from .reporters import REPORTERS
from .reporters.compare_slow import CompareSlowReporter
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
    select = p.add_argument_group("which samples")
    select.add_argument("--idle", action=argparse.BooleanOptionalAction, default=False,
                        help="keep samples of blocked threads (sleep, IO, locks, queues); default: drop them, "
                             "as py-spy does")
    select.add_argument("--thread", action="append", metavar="NAME|ID",
                        help="only this thread: its name, Linux thread id or serial (repeatable)")
    select.add_argument("--pid", action="append", type=int, metavar="PID",
                        help="a trace of a process tree: only this process (repeatable); see the `summary` format "
                             "for the processes")
    select.add_argument("--from", dest="from_s", type=float, metavar="SECONDS",
                        help="only samples taken at least this long after the recording started")
    select.add_argument("--to", dest="to_s", type=float, metavar="SECONDS",
                        help="only samples taken at most this long after the recording started")
    select.add_argument("--endpoint", action="append", metavar="NAME",
                        help="only samples of requests and jobs of this endpoint (`ProductsController#index`, a job "
                             "class, an Sdb.label endpoint; repeatable): see the `endpoints` format for the names")
    select.add_argument("--slower-than", dest="slower_than_ms", type=duration_ms, metavar="TIME",
                        help="only samples of requests and jobs that took at least this long: `200ms`, `1.5s`, or "
                             "milliseconds (slow-request profiles)")
    shape = p.add_argument_group("how stacks are rooted and named")
    shape.add_argument("--states", action="store_true",
                       help="put each sample's thread state (running, waiting for GVL, blocked) as its root frame")
    shape.add_argument("--merge-processes", action="store_true",
                       help="a trace of a process tree: the processes' threads side by side, with no process above "
                            "them (default: each process a root of its own)")
    shape.add_argument("--by", choices=["endpoint", "request"],
                       help="group by endpoint or by request/job: each sample's endpoint "
                            "(`[ProductsController#index]`) or request (`[ProductsController#index <request id>]`) "
                            "as its root frame, `(no request or job)` for samples outside any; speedscope: a profile "
                            "for each instead")
    shape.add_argument("--no-lines", dest="lines", action="store_false",
                       help="aggregate by function: frames without their line")
    shape.add_argument("--labels", choices=LABEL_CONVENTIONS, default=LABELS_SDB,
                       help="frame labels: sdb's (`block in Foo#bar`, as Ruby 3.4's backtraces; the default) or "
                            "exactly rb_profile_frame_full_label's (`Foo#bar` for a method's blocks, as stackprof "
                            "and OpenTelemetry show them)")
    out = p.add_argument_group("output")
    out.add_argument("--compare-slow", action="store_true",
                     help="with --endpoint and --slower-than: the endpoint's slow requests and its fast ones side by "
                          "side (each function's share of either's samples), instead of a --format")
    out.add_argument("--json-frames", action="store_true",
                     help="json: every sample line carries its frames (larger: a stack is repeated for each of "
                          "its samples), instead of naming a stack defined once on a line of its own")
    out.add_argument("--no-progress", dest="progress", action="store_false",
                     help="no progress line on stderr (it shows only on a terminal, for long runs)")
    p.add_argument("--version", action="version", version=f"sdb {__version__}")
    return p


def duration_ms(text: str) -> float:
    """`200ms`, `1.5s` or `200` (milliseconds) -> milliseconds."""
    t = text.strip().lower()
    scale = 1.0
    if t.endswith("ms"):
        t = t[:-2]
    elif t.endswith("s"):
        t, scale = t[:-1], 1000.0
    try:
        v = float(t) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (say 200ms or 1.5s)") from None
    if not v >= 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (say 200ms or 1.5s)")
    return v


class OutputFailed(Exception):
    """A write to the output failed (full disk, I/O error, closed pipe)."""

    def __init__(self, error: OSError):
        super().__init__(error.strerror)
        self.error = error


class _Guarded:
    """The output stream as reporters see it: a failed write becomes OutputFailed, told apart from
    errors of reading the trace (or of a reporter's temporary files)."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, data):
        try:
            return self._stream.write(data)
        except OSError as e:
            raise OutputFailed(e) from None

    def flush(self):
        try:
            self._stream.flush()
        except OSError as e:
            raise OutputFailed(e) from None


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except TraceError as e:
        sys.stderr.write(f"sdb-symbolize: error: {printable(e)}\n")
        return _code(e)
    except OutputFailed as e:
        if args.output == "-":
            # nothing more can reach stdout: keep the interpreter's exit from trying again
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            if e.error.errno == errno.EPIPE:
                return Exit.OUTPUT          # the reader went away (`| head`): not worth a line
        sys.stderr.write(f"sdb-symbolize: error: cannot write {printable(args.output if args.output != '-' else 'to standard output')}: "
                         f"{e.error.strerror}\n")
        return Exit.OUTPUT
    except OSError as e:                    # e.g. a reporter's temporary file on a full /tmp
        where = f"{e.filename}: " if e.filename else ""
        sys.stderr.write(f"sdb-symbolize: error: {printable(where)}{e.strerror or e}\n")
        return Exit.OUTPUT if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG) else Exit.FAILED


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
    if args.compare_slow and (not args.endpoint or args.slower_than_ms is None):
        sys.stderr.write("sdb-symbolize: error: --compare-slow needs --endpoint NAME and --slower-than TIME\n")
        return Exit.USAGE
    tables = load_tables(args.trace)
    reporter = (CompareSlowReporter if args.compare_slow else REPORTERS[args.format])(tables.header, args)
    reporter.end_ns = tables.end.get("at_ns") if tables.end else None
    reporter.ticks = tables.end.get("ticks") if tables.end else None
    reporter.end = tables.end
    try:
        samples = SamplePass(args.trace, tables, Options.from_args(args))
    except FilterError as e:
        sys.stderr.write(f"sdb-symbolize: error: {printable(e)}\n")     # it may list thread names
        return Exit.USAGE
    reporter.spans = samples.spans
    reporter.processes = [c.process for c in samples.ctx.values()]
    if getattr(reporter, "units_if_any", False) and samples.spans:
        reporter.by_unit = True         # its samples carry their unit of work (pprof's labels)
    reporter.shown_spans = samples.spans_shown()
    reporter.thread_of = samples.thread
    output = None
    if args.output != "-":
        try:
            output = open_output(args.output, binary=reporter.binary)
        except OSError as e:
            sys.stderr.write(f"sdb-symbolize: error: cannot write {printable(args.output)}: {e.strerror}\n")
            return Exit.OUTPUT
        stream = output.file
    else:
        stream = sys.stdout.buffer if reporter.binary else sys.stdout
    guarded = _Guarded(stream)
    try:
        reporter.start(guarded)
        samples.run(reporter, Progress(tables.sample_count) if args.progress else None)
        reporter.render(guarded)
        guarded.flush()
        if output is not None:
            try:
                output.commit()             # the profile appears at its path whole, or not at all
            except OSError as e:
                raise OutputFailed(e) from None
    except BaseException:
        if output is not None:
            output.discard()
        raise
    if samples.samples_unnamed:
        pauses = f"; the trace has {len(tables.ebpf_pauses)} eBPF pause(s), and a name given before a pause is " \
                 f"not taken after it starts" if tables.ebpf_pauses else ""
        sys.stderr.write(f"sdb-symbolize: note: {samples.samples_unnamed} of the {samples.samples_out} samples shown "
                         f"have a frame no name could be proven for, shown as (unknown ISeq 0x...){pauses}\n")
    if tables.error is None and samples.samples_in and not samples.samples_out:
        sys.stderr.write(f"sdb-symbolize: warning: none of the {samples.samples_in} samples match the filters "
                         f"(--thread, --from/--to, --idle, --endpoint, --slower-than)\n")
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
