from __future__ import annotations

import html
import json
import os
from array import array
from itertools import chain, repeat
from typing import IO, Dict, List, Tuple

from .base import Reporter
from .prefixes import common_prefix, decode, encode, typecode

TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "flamegraph.html")


class FlamegraphReporter(Reporter):
    """One self-contained HTML file (its own inline JS and CSS, nothing fetched): a flame graph of
    every thread (threads are the first level under "all"), frames merged by name and line,
    children in name order. Click to zoom, a search box that highlights matches and sums their
    samples, a tooltip with file:line and percentages (flamegraph.html).

    The tree is never built as objects: each distinct (thread, stack) becomes a byte string of
    its frames' numbers (prefixes.py), numbered in (name, location) order, and the strings are
    sorted. Preorder with children in name order is then that sorted order, a path's new nodes
    are those past the prefix it shares with the one before, and a node's samples are those of
    the run of paths that share it. Memory: 2-4 bytes a frame of each distinct stack; the nodes
    are written as they are found."""

    name = "flamegraph"
    extension = ".html"
    compact_stacks = True    # each stack's frames read once (samples.CompactStack)

    def __init__(self, recording, options):
        super().__init__(recording, options)
        self.counts: Dict[tuple, int] = {}

    def add(self, thread, stack, state, t_ns, count) -> None:
        key = (thread, stack)
        self.counts[key] = self.counts.get(key, 0) + count

    def paths(self) -> Tuple[List[tuple], str, List[Tuple[bytes, int]]]:
        """(keys, typecode, paths): keys, the distinct (name, location) pairs in sorted order (a
        thread's roots have no location); paths, each distinct (thread, stack) as its pairs below
        "all" by number in keys (prefixes.encode), with its samples, sorted."""
        frames: Dict[int, object] = {}      # by identity: a stack's frames are few distinct objects
        for _, stack in self.counts:
            fs = stack.frames       # made on each read (a CompactStack's): once
            frames.update(zip(map(id, fs), fs))
        pair_of = {i: (f.label, f"{f.path}:{f.line}" if f.path and f.line else (f.path or ""))
                   for i, f in frames.items()}
        roots = {r for th in {th for th, _ in self.counts} for r in th.roots}
        keys = sorted(set(pair_of.values()) | {(r, "") for r in roots})
        rank = {k: i for i, k in enumerate(keys)}
        key_of = {i: rank[p] for i, p in pair_of.items()}
        root_keys: Dict[object, List[int]] = {}
        code = typecode(len(keys))
        out = []
        for (thread, stack), n in self.counts.items():
            rk = root_keys.get(thread)
            if rk is None:
                rk = root_keys[thread] = [rank[(r, "")] for r in thread.roots]
            out.append((encode(code, chain(rk, map(key_of.__getitem__, map(id, stack.frames)))), n))
        out.sort()
        return keys, code, out

    @staticmethod
    def shared(paths: List[Tuple[bytes, int]], width: int) -> List[int]:
        """For each path, how many of its first nodes the path before it (sorted) has too."""
        lcp = [0] * len(paths)
        for i in range(1, len(paths)):
            lcp[i] = common_prefix(paths[i - 1][0], paths[i][0]) // width
        return lcp

    @staticmethod
    def totals(paths: List[Tuple[bytes, int]], lcp: List[int], width: int) -> List[tuple]:
        """For each path, the samples of the nodes it adds (depths lcp[i] to its end), in runs:
        ((first depth, total), ...). The node at depth k added by path i is shared by paths i..j-1,
        j the first after i sharing fewer than k+1 nodes with its predecessor: its total is the
        samples of that run (prefix sums). Walked backwards with a stack of (from depth, sum at
        the run's end) intervals, each pushed and popped once."""
        n = len(paths)
        before = [0] * (n + 1)      # samples of paths 0..i-1
        for i, (_, c) in enumerate(paths):
            before[i + 1] = before[i] + c
        runs: List[tuple] = [()] * n
        depths: List[int] = []      # interval starts, increasing
        ends: List[int] = []        # samples before the end of the run of paths that share depth >= start
        for i in range(n - 1, -1, -1):
            cut = lcp[i + 1] if i + 1 < n else 0   # the paths after i share depths < cut with path i
            while depths and depths[-1] >= cut:
                depths.pop()
                ends.pop()
            depths.append(cut)
            ends.append(before[i + 1] if i + 1 < n else before[n])
            length, first = len(paths[i][0]) // width, lcp[i]
            mine = []
            for k in range(len(depths) - 1, -1, -1):
                d = depths[k]
                if d >= length:
                    continue
                mine.append((max(d, first), ends[k] - before[i]))
                if d <= first:
                    break
            mine.reverse()
            runs[i] = tuple(mine)
        return runs

    def render(self, out: IO) -> None:
        h = self.header
        title = f"sdb flame graph: pid {h.get('pid')} {' '.join(h.get('command') or [])}".strip()
        keys, code, paths = self.paths()
        width = array(code).itemsize
        lcp = self.shared(paths, width)
        runs = self.totals(paths, lcp, width)
        # the string table, in the order nodes name them (preorder, name then location)
        strings: List[str] = []
        index: Dict[str, int] = {}

        def s(text):
            i = index.get(text)
            if i is None:
                i = index[text] = len(strings)
                strings.append(text)
            return i

        s("all")
        s("")
        node_head: List[str] = [""] * len(keys)   # a key's node text up to its total: "[name,location,"
        for i, (data, _) in enumerate(paths):
            for k in dict.fromkeys(decode(code, data[lcp[i] * width:])):
                if not node_head[k]:
                    node_head[k] = f"[{s(keys[k][0])},{s(keys[k][1])},"
        data_head = json.dumps({"title": title, "strings": strings}, separators=(",", ":"), ensure_ascii=False)
        data_head = data_head[:-1].replace("<", "\\u003c")   # no "</script" or "<!--" inside
        with open(TEMPLATE, encoding="utf-8") as f:
            page = f.read()
        before, after = page.split("__DATA__", 1)
        esc = html.escape(title)
        out.write(before.replace("__TITLE__", esc))
        total = sum(c for _, c in paths)
        out.write(f'{data_head},"nodes":[[0,1,{total},0]')
        on_path = array("l")        # node ids of the path written last, by depth
        next_id = 1
        for i, (data, _) in enumerate(paths):
            first = lcp[i]
            seg = decode(code, data[first * width:])
            m = len(seg)
            if not m:
                continue                            # the same pairs as the path before
            spans = runs[i] + ((first + m, 0),)
            totals = chain.from_iterable(repeat(spans[r][1], spans[r + 1][0] - spans[r][0])
                                         for r in range(len(spans) - 1))
            parents = chain((on_path[first - 1] if first else 0,), range(next_id, next_id + m - 1))
            out.write("," + ",".join(map("{}{},{}]".format, map(node_head.__getitem__, seg), totals, parents)))
            del on_path[first:]
            on_path.extend(range(next_id, next_id + m))
            next_id += m
        out.write("]}")
        out.write(after.replace("__TITLE__", esc))
