from sdb_trace import __version__  # one version, written in sdb_trace

__all__ = ["__version__"]
