"""Stacks as byte strings, for the formats that draw stacks as a tree (flamegraph, firefox): each
frame a fixed-width number, so two stacks share a prefix of frames exactly when their strings
share a prefix of bytes, and sorting and comparing them is memcmp. A deep stack costs 2 or 4 bytes
a frame this way, where a tree of Python objects costs hundreds a node (issue 44: 2 GB for a
flamegraph of 2,048-frame stacks that share little)."""
from __future__ import annotations

import sys
from array import array
from bisect import bisect_left
from itertools import repeat
from typing import Iterable, List, Tuple

BIG_ENDIAN = sys.byteorder == "big"


def typecode(n: int) -> str:
    """The array type of numbers below n: 2 bytes when they fit, else 4."""
    if n <= 1 << 16:
        return "H"
    if n > 1 << 32:
        raise ValueError(f"{n} distinct frames: more than 4-byte numbers hold")
    return "I"


def encode(code: str, numbers: Iterable[int]) -> bytes:
    """The numbers, big-endian at the type's width: byte order is then number order, so sorted
    strings are the sequences in lexicographic order."""
    a = array(code, numbers)
    if not BIG_ENDIAN:
        a.byteswap()
    return a.tobytes()


def decode(code: str, data: bytes) -> array:
    a = array(code)
    a.frombytes(data)
    if not BIG_ENDIAN:
        a.byteswap()
    return a


def common_prefix(a: bytes, b: bytes) -> int:
    """How many leading bytes a and b share (C speed: the first difference is the highest bit of
    their XOR read as big numbers)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    x = int.from_bytes(a[:n], "big") ^ int.from_bytes(b[:n], "big")
    return n - (x.bit_length() + 7) // 8


class StackTable:
    """A tree of stacks as rows (frame, prefix row, category), each row a distinct path from a
    root, numbered in the order the paths are first added: the Firefox Profiler's stack table.

    No row is looked up by its (prefix, frame): the paths added so far are kept as byte strings
    (2 bytes a frame while frame numbers fit, then all of them widened to 4), sorted, and a new path shares the most rows with one of its two sorted
    neighbours (a longest common prefix in a sorted set is a neighbour's). Its first new row's
    prefix is that neighbour's row at the depth above, found from a checkpoint (the path's row
    at every CHECKPOINT-th depth) by at most CHECKPOINT steps up the prefix column."""
    CHECKPOINT = 64

    def __init__(self):
        self.frame = array("I")
        self.prefix = array("i")     # -1: a root
        self.category = array("b")
        self._sorted: List[Tuple[bytes, int]] = []     # (path, its number), sorted
        self._leaf: List[int] = []                     # a path's last row
        self._depth: List[int] = []                    # its length
        self._checkpoints: List[array] = []            # its rows at depths 0, CHECKPOINT, ...
        self._code = "H"                               # the paths' strings' array type

    def _widen(self) -> None:
        """A frame number past 2 bytes: every path's string at 4 bytes a frame, sorted again."""
        self._code = "I"
        self._sorted = sorted((array("I", array("H", data)).tobytes(), n) for data, n in self._sorted)

    def __len__(self) -> int:
        return len(self.frame)

    def row_at(self, path: int, depth: int) -> int:
        k = self.CHECKPOINT
        j = -(-depth // k)
        if j * k < self._depth[path]:
            row, at = self._checkpoints[path][j], j * k
        else:
            row, at = self._leaf[path], self._depth[path] - 1
        prefix = self.prefix
        while at > depth:
            row = prefix[row]
            at -= 1
        return row

    def add(self, frames: array, category: int) -> int:
        """The row of `frames` (frame numbers, root first, typecode "I"; not empty) under
        `category`, adding the rows it lacks. A path's frames decide its category: callers give
        its first frame one per category."""
        if self._code == "H" and frames and max(frames) >= 1 << 16:
            self._widen()
        data = (frames if self._code == "I" else array("H", frames)).tobytes()
        width = 4 if self._code == "I" else 2
        depth = len(frames)
        pos = bisect_left(self._sorted, (data,))
        shared, near = 0, -1
        for j in (pos - 1, pos):
            if 0 <= j < len(self._sorted):
                n = common_prefix(self._sorted[j][0], data) // width
                if n > shared:
                    shared, near = n, self._sorted[j][1]
        if shared == depth:
            return self.row_at(near, depth - 1)         # every row is there
        base = len(self.frame)
        self.frame.extend(frames[shared:])
        self.prefix.append(self.row_at(near, shared - 1) if shared else -1)
        self.prefix.extend(range(base, base + depth - shared - 1))
        self.category.extend(repeat(category, depth - shared))
        k = self.CHECKPOINT
        kept = -(-shared // k)
        checkpoints = self._checkpoints[near][:kept] if kept else array("i")
        checkpoints.extend(range(base + kept * k - shared, base + depth - shared, k))
        number = len(self._leaf)
        self._leaf.append(len(self.frame) - 1)
        self._depth.append(depth)
        self._checkpoints.append(checkpoints)
        self._sorted.insert(pos, (data, number))
        return self._leaf[number]
