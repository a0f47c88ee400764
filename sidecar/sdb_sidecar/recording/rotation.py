"""The files of a recording (`--rotate`, `--keep`): one trace at -o's path, or one after another beside
it, each complete alone; each one finished is handed to the recording's `on_closed(path)` hook, then
the oldest beyond --keep removed."""
from __future__ import annotations

import os
import time
from typing import Callable, List, Optional

from .options import Options


class Files:
    """The trace files of a recording: one at -o's path, or with rotation (opts.rotate_s or
    rotate_bytes) one after another beside it, named after it with their start time in UTC
    (trace.msgpack -> trace.20261126T071500Z.msgpack), the newest opts.keep kept.

    on_closed(path), if given, is called once for each file finished (`finished`: rotated, or the
    last one at the recording's end), once it holds its end record and is closed, so that it reads
    as a whole trace; in the recording's own thread (the caller of TreeRecording.step and close),
    before the files beyond opts.keep are removed (a hook that keeps a file moves or copies it then).
    A file the recording could not finish (a write failed) is not handed over."""

    def __init__(self, path: str, opts: Options, on_closed: Optional[Callable[[str], None]] = None):
        self.path = path
        self.rotating = bool(opts.rotate_s or opts.rotate_bytes)
        self.keep = opts.keep
        self.written: List[str] = []
        self.current = path
        self.on_closed = on_closed

    def next(self) -> str:
        if not self.rotating:
            path = self.path
        else:
            stem = self.path[:-len(".msgpack")] if self.path.endswith(".msgpack") else self.path
            when = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            path, n = f"{stem}.{when}.msgpack", 1
            while path in self.written or os.path.exists(path):
                path, n = f"{stem}.{when}-{n}.msgpack", n + 1
        self.written.append(path)
        self.current = path
        return path

    def finished(self, path: str) -> None:
        """The file at path is complete and closed: the hook sees it, then the oldest beyond keep go."""
        if self.on_closed is not None:
            self.on_closed(path)
        self.prune()

    def prune(self) -> None:
        """Remove this recording's files beyond the newest `keep` (never another's)."""
        if not self.rotating:
            return
        while len(self.written) > self.keep:
            old = self.written.pop(0)
            try:
                os.unlink(old)
            except FileNotFoundError:
                pass
