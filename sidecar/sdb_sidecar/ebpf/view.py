"""One process's view of the tree's eBPF symbolizer (symbolizer.EbpfSymbolizer): what its Drainer and the
status line read."""
from __future__ import annotations

from typing import TYPE_CHECKING, List

if TYPE_CHECKING:
    from .symbolizer import EbpfSymbolizer


class EbpfView:
    """What one process's Drainer and status line see of the eBPF symbolizer: its own records and
    attach time; the pauses, losses and ring buffer are the program's, shared by the tree."""

    def __init__(self, sym: "EbpfSymbolizer", pid: int):
        self.sym = sym
        self.pid = pid

    @property
    def max_rate(self) -> float:
        return self.sym.max_rate

    @property
    def pauses(self) -> List[list]:
        return self.sym.pauses

    @property
    def paused(self) -> bool:
        return self.sym.paused

    @property
    def attach_kind(self) -> str:
        return self.sym.attach_kind

    @property
    def attached_ns(self) -> int:
        t = self.sym.targets.get(self.pid)
        return t.attached_ns if t is not None else 1 << 63

    def sync(self) -> None:
        self.sym.sync()

    def take(self) -> List[dict]:
        return self.sym.take(self.pid)

    def attached_throughout(self, a_ns: int, b_ns: int) -> bool:
        return self.sym.attached_throughout(self.pid, a_ns, b_ns)

    def summary(self) -> dict:
        return self.sym.summary(self.pid)
