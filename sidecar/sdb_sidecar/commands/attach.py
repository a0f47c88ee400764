from __future__ import annotations

import argparse

from ..recording.options import Options
from ..recording.recorder import record
from ..target.target import open_target
from ..push.config import push_config
from .common import add_push_arguments, add_recording_arguments, finish_recording


class AttachCommand:
    """Record every thread of a running Ruby process (one that did `require "sdb"`) into a trace."""

    name = "attach"

    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("--pid", "-p", type=int, required=True, help="the Ruby process to record")
        add_recording_arguments(p)
        add_push_arguments(p)

    @staticmethod
    def run(args) -> int:
        push = push_config(args)
        target = open_target(args.pid)
        counts = record(target, args.output, Options.from_args(args, push=push))
        return finish_recording(args, counts)
