from __future__ import annotations

from typing import IO, Callable, Dict, List, Optional

from ..samples import Process, Stack, Thread


class Reporter:
    """The one interface every output format implements.

    The command hands samples to `add()` and then calls `render(out)` once; a reporter never opens
    files or parses arguments. An aggregating reporter (timeline = False) gets one `add()` per
    distinct (thread, stack, state) with its count, in no particular order, and t_ns None; a
    timeline reporter gets every sample in time order (count 1, t_ns its time). `start(out)` comes
    first, for reporters that write as samples arrive (memory stays flat)."""

    name = ""            # --format value
    extension = ""       # default file extension
    binary = False       # render() writes bytes, not text
    timeline = False     # wants every sample, in time order
    end_ns: Optional[int] = None   # set by the command: when the recording ended (None: cut short)
    end: Optional[dict] = None     # set by the command: the trace's end record (None: cut short)
    spans: Dict[int, dict] = {}    # set by the command: the trace's units of work (Tables.spans)
    ticks: Optional[int] = None    # set by the command: the sampler's ticks (None: cut short)
    shown_spans: List[dict] = []   # set by the command: the spans the filters keep, in the order they began
    thread_of: Optional[Callable[[int], Thread]] = None   # set by the command: a thread serial's Thread
    processes: List[Process] = []  # set by the command: the processes the filters keep (one for most traces)

    def __init__(self, header: dict, options):
        self.header = header
        self.options = options
        rate = header.get("rate_hz") or 1000
        self.period_ns = int(round(1e9 / rate))   # what one sample weighs in time
        self.start_ns = header.get("start_mono_ns", 0)   # when the recording started (CLOCK_MONOTONIC)
        self.out: Optional[IO] = None

    def start(self, out: IO) -> None:
        self.out = out

    def add(self, thread: Thread, stack: Stack, state: int, t_ns: Optional[int], count: int) -> None:
        """`count` samples of `thread` in `stack` (named frames, root first) and thread `state`."""
        raise NotImplementedError

    def render(self, out: IO) -> None:
        raise NotImplementedError
