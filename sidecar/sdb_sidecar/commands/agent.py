from __future__ import annotations

import argparse
import os

from ..agent.agent import Agent
from ..agent.selection import Selection
from ..errors import Exit, SdbError
from ..recording.options import Options
from ..push.config import push_config
from .common import add_depth_argument, add_push_arguments, non_negative_float, positive_float

AGENT_RATE_HZ = 100.0       # always on: a tenth of attach's default (docs/agent.md: what it costs)


class AgentCommand:
    """Run once per host: record every process that runs the sdb gem (in this host's namespaces and in
    every container), each process tree from the moment its registry appears to its exit, and push
    its profiles (--push) or write its trace (-o DIR). Until SIGTERM."""

    name = "agent"

    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("--rate", "-r", type=positive_float, default=AGENT_RATE_HZ,
                       help=f"samples per second of each process (default {AGENT_RATE_HZ:g})")
        p.add_argument("-o", "--output-dir", metavar="DIR",
                       help="also write each process tree's trace in DIR (SERVICE.PID.START.msgpack)")
        p.add_argument("--include", action="append", default=[], metavar="GLOB",
                       help="record only processes whose service name or cgroup path matches (repeatable)")
        p.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                       help="never record processes whose service name or cgroup path matches (repeatable)")
        p.add_argument("--max-cpu", type=non_negative_float, default=0.0, metavar="PERCENT",
                       help="the agent's CPU budget, in %% of one core (all its threads); over it, the rate is "
                            "lowered and every recording restarts at it (default 0: no budget)")
        add_depth_argument(p)
        add_push_arguments(p, service=False)

    @staticmethod
    def run(args) -> int:
        push = push_config(args)
        if push is None and not args.output_dir:
            raise SdbError("say where the profiles go: --push KIND=URL, -o DIR, or both", Exit.USAGE)
        if args.output_dir and not os.path.isdir(args.output_dir):
            raise SdbError(f"-o {args.output_dir}: no such directory", Exit.OUTPUT)
        if args.output_dir and not os.access(args.output_dir, os.W_OK | os.X_OK):
            raise SdbError(f"-o {args.output_dir}: permission denied", Exit.OUTPUT)
        # no eBPF yet: its programs are compiled for one Ruby's layout per recording (a hub per tree
        # would compile once per process tree); every ISeq is named by a remote read at first sight
        opts = Options(rate_hz=args.rate, max_depth=args.max_depth, quiet=True, ebpf=False, in_context=False,
                       children=True, push=push)
        return Agent(opts, args.output_dir, Selection(args.include, args.exclude), max_cpu=args.max_cpu).run()
