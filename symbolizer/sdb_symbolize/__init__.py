"""sdb-symbolize: turn a raw trace into profiles people read."""
__version__ = "0.1.0"
