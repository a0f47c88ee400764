from __future__ import annotations

import argparse
import shlex
import sys

from ..recorder import record
from ..target import open_target


class AttachCommand:
    """Record every thread of a running Ruby process (one that did `require "sdb"`) into a trace."""

    name = "attach"

    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("--pid", "-p", type=int, required=True, help="the Ruby process to record")
        add_recording_arguments(p)

    @staticmethod
    def run(args) -> int:
        target = open_target(args.pid)
        counts = record(target, args.output, args.rate, args.duration, args.quiet, args.max_depth,
                        ebpf=not args.no_ebpf)
        if not args.quiet:
            print_next_steps(args.output, counts)
        return 0


def add_recording_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rate", "-r", type=positive_float, default=1000.0, help="samples per second (default 1000)")
    p.add_argument("--duration", "-d", type=positive_float, default=0.0,
                   help="seconds to record (default: until Ctrl-C or the target exits)")
    p.add_argument("-o", "--output", default="trace.msgpack", help="trace file (default trace.msgpack)")
    p.add_argument("--max-depth", type=int, default=2048, help="frames read per stack at most (default 2048)")
    p.add_argument("--quiet", "-q", action="store_true", help="no status line")
    p.add_argument("--no-ebpf", action="store_true",
                   help="do not name ISeqs at birth with eBPF (default: use it when root, bcc, kernel headers "
                        "and uprobes are there); every ISeq is then named by a remote read at first sight")


def positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0: {text!r}")
    return v


def print_next_steps(output: str, counts: dict) -> None:
    q = shlex.quote(output)
    sys.stderr.write(f"sdb: wrote {counts['samples']} samples of {counts['threads']} threads to {output} "
                     f"({counts['reason']})\n"
                     f"sdb: next: sdb-symbolize {q} --format collapsed -o profile.collapsed\n")
