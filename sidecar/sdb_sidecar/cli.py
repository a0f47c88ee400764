"""sdb-sidecar: the command line. Errors become one line on stderr and an exit code here, and only here."""
from __future__ import annotations

import argparse
import os
import sys

from sdb_trace import TraceWriteError
from sdb_trace.output import printable

from . import __version__
from .commands import COMMANDS
from .ebpf.hub import EbpfHub
from .errors import Exit, SdbError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sdb-sidecar", description="Sample the stacks of a live Ruby process "
                                     "from outside it, without pausing it.")
    parser.add_argument("--version", action="version", version=f"sdb {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for cmd in COMMANDS:
        # argparse %-formats a subcommand's help (not its description): "%own" must reach it as "%%own"
        doc = (cmd.__doc__ or "").replace("%", "%%")
        p = sub.add_parser(cmd.name, help=doc, description=cmd.__doc__)
        cmd.add_arguments(p)
        p.set_defaults(run=cmd.run)
    return parser


def main(argv=None) -> int:
    rc = _main(argv)
    if EbpfHub.compiling():
        # bcc (C++, LLVM) is still compiling in a thread for a recording that has ended (a short
        # program): the interpreter's exit would run LLVM's static destructors under it (abort,
        # "pure virtual method called"). Nothing of that thread's work is needed: leave at once.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    return rc


def _main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except SdbError as e:
        sys.stderr.write(f"sdb-sidecar: error: {printable(e)}\n")   # may quote names the target chose
        return e.code
    except TraceWriteError as e:        # the header or the end record (recorder.record handles the rest)
        sys.stderr.write(f"sdb-sidecar: error: cannot write the trace: {e.strerror}\n")
        return Exit.OUTPUT
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return Exit.FAILED


if __name__ == "__main__":
    sys.exit(main())
