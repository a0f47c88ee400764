from __future__ import annotations

import argparse
import json
import sys

from sdb_trace.output import printable

from ..recording.snapshot import format_text, snapshot
from ..target.target import open_target


class SnapshotCommand:
    """Print every thread's current stack once (like jstack), innermost frame first."""

    name = "snapshot"

    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("--pid", "-p", type=int, required=True, help="the Ruby process to look at")
        p.add_argument("--json", action="store_true", help="JSON, as {pid, ruby, threads: [{native_id, name, frames}]}")

    @staticmethod
    def run(args) -> int:
        snap = snapshot(open_target(args.pid))
        if args.json:
            json.dump(snap, sys.stdout, indent=1)     # ASCII only: every control character escaped
            sys.stdout.write("\n")
        else:
            sys.stdout.write(format_text(escaped(snap)))
        return 0


def escaped(snap: dict) -> dict:
    """The snapshot with every name the target chose (thread names, labels, paths) made safe to print
    on a terminal (sdb_trace.output.printable): no escape sequence, BEL or line break gets through."""
    threads = []
    for t in snap["threads"]:
        frames = [dict(f, label=printable(f["label"]), path=printable(f["path"]) if f["path"] else f["path"])
                  for f in t["frames"]]
        threads.append(dict(t, name=printable(t["name"]) if t["name"] else t["name"], frames=frames))
    return dict(snap, threads=threads)
