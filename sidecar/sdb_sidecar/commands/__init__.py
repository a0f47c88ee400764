"""The sidecar's subcommands: one file each, listed here. A command's help is its docstring."""
from .attach import AttachCommand
from .snapshot import SnapshotCommand

COMMANDS = [AttachCommand, SnapshotCommand]
