"""The sidecar's subcommands: one file each, listed here. A command's help is its docstring."""
from .agent import AgentCommand
from .attach import AttachCommand
from .record import RecordCommand
from .snapshot import SnapshotCommand
from .top import TopCommand

COMMANDS = [AttachCommand, RecordCommand, TopCommand, SnapshotCommand, AgentCommand]
