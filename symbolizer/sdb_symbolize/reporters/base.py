from __future__ import annotations

from typing import IO, Tuple

from ..resolve import Frame


class Reporter:
    """The one interface every output format implements."""

    name = ""            # --format value
    extension = ""       # default file extension
    binary = False       # render() writes bytes, not text

    def __init__(self, header: dict, options):
        self.header = header
        self.options = options

    def add(self, thread: str, stack: Tuple[Frame, ...], state: int, t_ns: int, count: int) -> None:
        """One sample (or `count` identical ones): thread label, named frames root first."""
        raise NotImplementedError

    def render(self, out: IO) -> None:
        raise NotImplementedError
