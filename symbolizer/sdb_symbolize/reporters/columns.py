"""Sample columns for the timeline formats, whose output holds every sample: memory stays flat on
recordings of any length because a column goes to a temporary file once it is long."""
from __future__ import annotations

import tempfile
from array import array
from typing import IO, Callable, Iterator


class Column:
    """A column of numbers that may be longer than memory should hold: kept in an array until
    SPILL entries, then appended to a temporary file. Read back in chunks, in order."""
    SPILL = 1 << 16    # entries per column kept in memory: 0.5 MiB; a thread's columns, 1 MiB at most

    def __init__(self, typecode: str):
        self.typecode = typecode
        self.buf = array(typecode)
        self.file = None
        self.length = 0

    def append(self, x) -> None:
        self.buf.append(x)
        self.length += 1
        if len(self.buf) >= self.SPILL:
            if self.file is None:
                self.file = tempfile.TemporaryFile(prefix="sdb-column-")
            self.buf.tofile(self.file)
            del self.buf[:]

    def __len__(self) -> int:
        return self.length

    def chunks(self) -> Iterator[array]:
        if self.file is not None:
            self.file.seek(0)
            left = self.length - len(self.buf)
            while left:
                a = array(self.typecode)
                a.fromfile(self.file, min(left, self.SPILL))
                left -= len(a)
                yield a
        if self.buf:
            yield self.buf

    def write(self, out: IO, text: Callable = str) -> None:
        """Every entry as text(entry), comma-separated, a chunk at a time (no brackets)."""
        sep = ""
        for chunk in self.chunks():
            for i in range(0, len(chunk), 256):   # 256 at a time: an entry's text can be long (deep stacks)
                out.write(sep + ",".join(map(text, chunk[i:i + 256])))
                sep = ","

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
