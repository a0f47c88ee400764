"""sdb-symbolize: turn a raw trace into profiles people read."""
from sdb_trace import __version__  # one version, written in sdb_trace

__all__ = ["__version__"]
