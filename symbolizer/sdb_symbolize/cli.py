"""sdb-symbolize: names the frames of a raw trace and writes a profile.

The command line becomes one ProfileOptions, and the profile is made by the library (profile.py).
Errors become one line on stderr and an exit code here, and only here; whatever the
trace holds before a problem is still written out."""
from __future__ import annotations

import argparse
import errno
import os
import sys

from sdb_trace import Corrupt, NewerVersion, TraceError, TraceFile, Truncated
from sdb_trace.output import printable

from . import __version__
from .labels import LABEL_CONVENTIONS, LABELS_SDB
from .options import BY_CHOICES, ProfileOptions, UsageError
from .profile import OutputFailed, render, write_profile
from .reporters import REPORTERS
from .samples import Progress


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
    select.add_argument("--sample-type", metavar="NAME",
                        help="the sample type to show: `wall` (every thread's time; the default), `cpu` (the samples "
                             "of running threads), or another the recording declares (the `summary` format names "
                             "them); pprof carries every type (this one its default), speedscope this one only")
    shape = p.add_argument_group("how stacks are rooted and named")
    shape.add_argument("--states", action="store_true",
                       help="put each sample's thread state (running, waiting for GVL, blocked) as its root frame")
    shape.add_argument("--merge-processes", action="store_true",
                       help="a trace of a process tree: the processes' threads side by side, with no process above "
                            "them (default: each process a root of its own)")
    shape.add_argument("--by", choices=BY_CHOICES,
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
    out.add_argument("--service", metavar="NAME",
                     help="otlp: the service.name of its resources (default: the trace's service, "
                          "else the recorded process's title)")
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


def options_from_args(args: argparse.Namespace) -> ProfileOptions:
    """The command line's rendering options as one value (UsageError: they make no sense together)."""
    return ProfileOptions(format=args.format, compare_slow=args.compare_slow, idle=args.idle,
                          threads=args.thread or (), pids=args.pid or (), from_s=args.from_s, to_s=args.to_s,
                          endpoints=args.endpoint or (), slower_than_ms=args.slower_than_ms, states=args.states,
                          merge_processes=args.merge_processes, by=args.by, lines=args.lines, labels=args.labels,
                          json_frames=args.json_frames, sample_type=args.sample_type, service=args.service)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if not os.path.isfile(args.trace):
            raise TraceError(f"{args.trace}: no such file")        # said before any misused option
        options = options_from_args(args)
    except (TraceError, UsageError) as e:
        return _failed(e, args.output)
    return symbolize(args.trace, options, args.output, args.progress)


def symbolize(trace: str, options: ProfileOptions, output: str = "-", progress: bool = True) -> int:
    """sdb-symbolize without its argv: the profile of the trace file `trace` to `output` ("-": standard
    output); problems as one line on stderr, notes and warnings too; returns the exit code. The
    sidecar's `attach --format` calls this in-process."""
    try:
        return _run(trace, options, output, progress)
    except (TraceError, UsageError, OutputFailed, OSError) as e:
        return _failed(e, output)


def _failed(e: Exception, output: str) -> int:
    """One line on stderr for `e`, and its exit code."""
    if isinstance(e, TraceError):
        sys.stderr.write(f"sdb-symbolize: error: {printable(e)}\n")
        return _code(e)
    if isinstance(e, UsageError):
        sys.stderr.write(f"sdb-symbolize: error: {printable(e)}\n")     # it may list thread names
        return Exit.USAGE
    if isinstance(e, OutputFailed):
        if output == "-":
            # nothing more can reach stdout: keep the interpreter's exit from trying again
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            if e.error.errno == errno.EPIPE:
                return Exit.OUTPUT          # the reader went away (`| head`): not worth a line
        where = printable(output if output != '-' else 'to standard output')
        sys.stderr.write(f"sdb-symbolize: error: cannot write {where}: {e.error.strerror}\n")
        return Exit.OUTPUT
    # an OSError, e.g. a reporter's temporary file on a full /tmp
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


def _run(trace: str, options: ProfileOptions, output: str, progress: bool) -> int:
    if not os.path.isfile(trace):
        raise TraceError(f"{trace}: no such file")
    source = TraceFile(trace)
    tables = source.tables
    shown = Progress(tables.sample_count) if progress else None
    if output != "-":
        result = write_profile(source, options, output, shown)
    else:
        result = render(source, options, sys.stdout.buffer, shown)
    if result.samples_unnamed:
        pauses = f"; the trace has {len(tables.ebpf_pauses)} eBPF pause(s), and a name given before a pause is " \
                 f"not taken after it starts" if tables.ebpf_pauses else ""
        sys.stderr.write(f"sdb-symbolize: note: {result.samples_unnamed} of the {result.samples_out} samples shown "
                         f"have a frame no name could be proven for, shown as (unknown ISeq 0x...){pauses}\n")
    if tables.error is None and result.samples_in and not result.samples_out:
        sys.stderr.write(f"sdb-symbolize: warning: none of the {result.samples_in} samples match the filters "
                         f"(--thread, --from/--to, --idle, --endpoint, --slower-than)\n")
    if tables.error is not None:
        sys.stderr.write(f"sdb-symbolize: error: {tables.error} ({tables.sample_count} samples before it "
                         f"were written)\n")
        return _code(tables.error)
    if tables.end is None:
        sys.stderr.write(f"sdb-symbolize: warning: {trace}: recording was cut short (no end record); "
                         f"{tables.sample_count} samples written\n")
    return Exit.OK


if __name__ == "__main__":
    sys.exit(main())
