from __future__ import annotations

from typing import Tuple

from .summary import SummaryReporter


class SummaryByLineReporter(SummaryReporter):
    """The summary table per source line (`path:line` and the function it is in)."""

    name = "summary-by-line"
    extension = ".summary-by-line.txt"
    what = "LINE"

    def key(self, frame) -> Tuple:
        return (frame.path or "", frame.line, frame.label)

    def describe(self, key: Tuple) -> str:
        path, line, label = key
        if not path:
            return label
        return f"{path}:{line} {label}" if line else f"{path} {label}"   # no line: --no-lines
