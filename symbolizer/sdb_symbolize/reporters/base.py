from __future__ import annotations

from dataclasses import dataclass, field
from typing import IO, Callable, Dict, List, Optional

from sdb_trace import STATE_NAMES, SampleType, sample_types_of

from ..options import ProfileOptions
from ..samples import Process, Stack, Thread


@dataclass(frozen=True)
class Recording:
    """What a reporter knows of the recording besides its samples (profile.render makes it)."""
    header: dict                                   # the trace's header record
    end: Optional[dict] = None                     # its end record (None: cut short)
    spans: Dict[int, dict] = field(default_factory=dict)    # its units of work by id of the trace (Tables.spans)
    shown_spans: List[dict] = field(default_factory=list)   # the spans the filters keep, in the order they began
    processes: List[Process] = field(default_factory=list)  # the processes the filters keep (one for most traces)
    thread_of: Optional[Callable[[int], Thread]] = None     # a thread id of the trace -> its Thread
    sample_types: Optional[List[SampleType]] = None         # what its samples measure (None: the header's)
    sample_type: int = 0                                    # the index of the type single-type outputs show
    process_records: Dict[int, dict] = field(default_factory=dict)  # Process.proc -> its `process` record, if any

    @property
    def end_ns(self) -> Optional[int]:
        """When the recording ended (None: cut short)."""
        return self.end.get("at_ns") if self.end else None

    @property
    def ticks(self) -> Optional[int]:
        """The sampler's ticks (None: cut short)."""
        return self.end.get("ticks") if self.end else None


class Reporter:
    """The one interface every output format implements.

    profile.render hands samples to `add()` and then calls `render(out)` once; a reporter never opens
    files or parses arguments. An aggregating reporter (timeline = False) gets one `add()` per
    distinct (thread, stack, state) with its count, in no particular order, and t_ns None; a
    timeline reporter gets every sample in time order (count 1, t_ns its time). `start(out)` comes
    first, for reporters that write as samples arrive (memory stays flat).

    Sample types (sdb_trace.sample_types): a reporter is handed the samples of one type, the chosen
    `sample_type` (ProfileOptions.sample_type; the recording's first, wall, by default); an
    aggregating reporter's count is then that type's: samples for a sampled type (time: each one
    `period_ns`), summed values for a measured one. `values = True`: add() and add_unit() also get
    `values=`, a tuple with the samples' summed value in each of `sample_types` (None: not of that
    type) and count is the number of samples; `all_types = True` (with values): samples of every
    type are handed, not only the chosen type's (pprof: a sample_type each)."""

    name = ""            # --format value
    extension = ""       # default file extension
    binary = False       # render() writes bytes, not text
    timeline = False     # wants every sample, in time order
    by_unit = False      # wants each sample's unit of work (add_unit)
    units_if_any = False  # ... when the recording has units of work
    values = False       # add() gets values= (one per sample type)
    all_types = False    # ... and samples of every type, not only the chosen one's

    def __init__(self, recording: Recording, options: ProfileOptions):
        self.recording = recording
        self.header = recording.header
        self.options = options
        self.end = recording.end
        self.end_ns = recording.end_ns
        self.ticks = recording.ticks
        self.spans = recording.spans
        self.shown_spans = recording.shown_spans
        self.processes = recording.processes
        self.thread_of = recording.thread_of
        if self.units_if_any and recording.spans:
            self.by_unit = True         # its samples carry their unit of work (pprof's labels)
        rate = self.header.get("rate_hz") or 1000
        self.period_ns = int(round(1e9 / rate))   # what one sample weighs in time
        self.sample_types: List[SampleType] = recording.sample_types or sample_types_of(self.header)
        self.sample_type: SampleType = self.sample_types[recording.sample_type]
        # several types, or one asked for: outputs that show one type say which
        self.names_type = len(self.sample_types) > 1 or getattr(options, "sample_type", None) is not None
        self.start_ns = self.header.get("start_mono_ns", 0)   # when the recording started (CLOCK_MONOTONIC)
        self.out: Optional[IO] = None

    def type_words(self) -> str:
        """The chosen sample type in words, for outputs that say which they count: `wall (every
        thread)`, `cpu (threads running)`."""
        t = self.sample_type
        if t.of is not None:
            whose = "threads " + " or ".join(STATE_NAMES.get(s, str(s)) for s in t.states)
        else:
            whose = "every thread" if t.sampled else t.unit
        return f"{t.name} ({whose})"

    def start(self, out: IO) -> None:
        self.out = out

    def add(self, thread: Thread, stack: Stack, state: int, t_ns: Optional[int], count: int) -> None:
        """`count` samples of `thread` in `stack` (named frames, root first) and thread `state`."""
        raise NotImplementedError

    def render(self, out: IO) -> None:
        raise NotImplementedError
