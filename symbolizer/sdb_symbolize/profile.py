"""Profiles as a library: a recording's samples plus their names -> a profile in any format, as
bytes or to a stream, from a trace file or from samples in memory, its options one typed value.

    from sdb_symbolize.profile import ProfileOptions, render_bytes
    from sdb_trace import TraceFile
    data = render_bytes(TraceFile("trace.msgpack"), ProfileOptions(format="pprof"))

A source is a `sdb_trace.TraceFile` or a `sdb_trace.MemoryTrace(header, keep_samples=True)` that the
sidecar's Drainer wrote into (no file): both give the same bytes (a source may also offer its samples
already grouped, `sample_groups()`: grouped.py). sdb-symbolize (cli.py) is argparse
around this module; the sidecar's `attach --format` calls it in-process. Errors: UsageError (a
filter that matches nothing), OutputFailed (a write to `out` failed), TraceError from the source."""
from __future__ import annotations

from dataclasses import dataclass
from io import BytesIO
from typing import IO, List, Optional, Type

from sdb_trace.output import open_output

from .options import ProfileOptions, UsageError
from .reporters import REPORTERS
from .reporters.base import Recording, Reporter
from .reporters.compare_slow import CompareSlowReporter
from .samples import FilterError, KeptNames, Progress, SamplePass

__all__ = ["ProfileOptions", "Profile", "KeptNames", "RenderResult", "render", "render_bytes", "write_profile", "UsageError",
           "FilterError", "OutputFailed", "reporter_class"]


class OutputFailed(Exception):
    """A write to the output failed (full disk, I/O error, closed pipe): told apart from errors of
    reading the trace (or of a reporter's temporary files)."""

    def __init__(self, error: OSError):
        super().__init__(error.strerror)
        self.error = error


class _Guarded:
    """The output stream as reporters see it: a failed write becomes OutputFailed. A text format's
    strings are gathered and written as UTF-8 in pieces of about _CHUNK characters (a profile's
    bytes are the same on stdout, in a file, in memory; encoding per piece, not per line)."""

    _CHUNK = 1 << 16

    def __init__(self, stream: IO[bytes], text: bool):
        self._stream = stream
        self._text = text
        self._parts: List[str] = []
        self._pending = 0

    def write(self, data):
        if not self._text:
            return self._put(data)
        self._parts.append(data)
        self._pending += len(data)
        if self._pending >= self._CHUNK:
            self._drain()
        return len(data)

    def _drain(self) -> None:
        data = "".join(self._parts).encode("utf-8")
        self._parts.clear()
        self._pending = 0
        self._put(data)

    def _put(self, data):
        try:
            return self._stream.write(data)
        except OSError as e:
            raise OutputFailed(e) from None

    def flush(self):
        if self._parts:
            self._drain()
        try:
            self._stream.flush()
        except OSError as e:
            raise OutputFailed(e) from None


def reporter_class(options: ProfileOptions) -> Type[Reporter]:
    """The reporter of `options`: its format's, or compare-slow's."""
    if options.compare_slow:
        return CompareSlowReporter
    cls = REPORTERS.get(options.format)
    if cls is None:
        raise UsageError(f"no format {options.format!r} (formats: {', '.join(sorted(REPORTERS))})")
    return cls


@dataclass
class RenderResult:
    """What a render handed over: samples read, samples shown, and of those, samples with a frame
    no name could be proven for (shown as `(unknown ISeq 0x...)`)."""
    samples_in: int
    samples_out: int
    samples_unnamed: int


class Profile:
    """One profile of one source: the options checked and the filters matched against the recording
    on construction (UsageError: nothing is written then), written once by `render(out)`."""

    def __init__(self, source, options: ProfileOptions, kept: Optional[KeptNames] = None):
        self.source = source
        self.options = options
        cls = reporter_class(options)
        self.samples = samples = SamplePass(source, options, kept)
        tables = source.tables
        recording = Recording(header=tables.header, end=tables.end, spans=samples.spans,
                              shown_spans=samples.spans_shown(),
                              processes=[c.process for c in samples.ctx.values()], thread_of=samples.thread,
                              sample_types=samples.types, sample_type=samples.chosen,
                              process_records={proc: c.t.process for proc, c in samples.ctx.items() if c.t.process})
        self.reporter = cls(recording, options)

    @property
    def binary(self) -> bool:
        """The format is binary (pprof), not text."""
        return self.reporter.binary

    @property
    def extension(self) -> str:
        return self.reporter.extension or f".{self.reporter.name}"

    def render(self, out: IO[bytes], progress: Optional[Progress] = None) -> RenderResult:
        """Writes the profile's bytes to `out` (a binary file object: flushed, not closed). A text
        format is written as UTF-8 (the same bytes on stdout, in a file, in memory)."""
        stream = _Guarded(out, text=not self.reporter.binary)
        reporter, samples = self.reporter, self.samples
        reporter.start(stream)
        samples.run(reporter, progress)
        reporter.render(stream)
        stream.flush()
        return RenderResult(samples.samples_in, samples.samples_out, samples.samples_unnamed)


    def collect(self) -> Reporter:
        """Runs the sample pass into the reporter and gives it back unrendered (a caller that makes
        several outputs of one pass from the reporter's own builder: the sidecar's push)."""
        self.reporter.start(_Guarded(BytesIO(), text=not self.reporter.binary))
        self.samples.run(self.reporter)
        return self.reporter


def render(source, options: ProfileOptions, out: IO[bytes], progress: Optional[Progress] = None,
           kept: Optional[KeptNames] = None) -> RenderResult:
    """The profile of `source` (a TraceFile, or a MemoryTrace that kept its samples) to `out`.
    `kept`: the named stacks of earlier renders of the same growing source (samples.KeptNames)."""
    return Profile(source, options, kept).render(out, progress)


def render_bytes(source, options: ProfileOptions, kept: Optional[KeptNames] = None) -> bytes:
    """The profile of `source` as bytes."""
    out = BytesIO()
    render(source, options, out, kept=kept)
    return out.getvalue()


def write_profile(source, options: ProfileOptions, path: str, progress: Optional[Progress] = None) -> RenderResult:
    """The profile of `source` written to `path` by sdb's output rule (sdb_trace.output): it appears
    there whole, or not at all (what was at `path` is kept when anything fails). OutputFailed when
    `path` cannot be opened or written."""
    profile = Profile(source, options)          # a UsageError leaves no file behind
    try:
        output = open_output(path, binary=True)
    except OSError as e:
        raise OutputFailed(e) from None
    try:
        result = profile.render(output.file, progress)
        try:
            output.commit()
        except OSError as e:
            raise OutputFailed(e) from None
    except BaseException:
        output.discard()
        raise
    return result
