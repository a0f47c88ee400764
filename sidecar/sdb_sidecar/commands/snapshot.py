from __future__ import annotations

import argparse
import json
import sys

from ..snapshot import format_text, snapshot
from ..target import open_target


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
            json.dump(snap, sys.stdout, indent=1)
            sys.stdout.write("\n")
        else:
            sys.stdout.write(format_text(snap))
        return 0
