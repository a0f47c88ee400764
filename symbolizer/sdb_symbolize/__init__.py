"""sdb-symbolize: turn a raw trace into profiles people read."""
from sdb_trace import __version__  # noqa: F401  (one version, written in sdb_trace)
