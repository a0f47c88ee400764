"""sdb-sidecar: samples a Ruby process's stacks from outside. Its layers, each a folder, calls going
down only (tests/unit/test_layers.py):

    cli.py          the command line: every SdbError becomes one line and an exit code here
    commands/       one file per subcommand (attach, record, top, snapshot, agent)
    agent/          one per host: a recording per process tree that runs the gem
    recording/      a recording assembled: target + sampler + session, a tree of processes, files, rotation
    push/           profiles pushed while recording
    ebpf/           the eBPF programs and their coordination (the hub, one per recording)
    target/         the process recorded: its registry opened, procfs, Ruby's objects read remotely
    sampler/        the Cython sampler (no GIL) over small C units (native/)
    errors.py       SdbError and the exit codes, shared by every layer
"""
from sdb_trace import __version__  # one version, written in sdb_trace

__all__ = ["__version__"]
