from __future__ import annotations

import html
import json
import os
from typing import IO, Dict, List

from .base import Reporter

TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "flamegraph.html")


class FlamegraphReporter(Reporter):
    """One self-contained HTML file (its own inline JS and CSS, nothing fetched): a flame graph of
    every thread (threads are the first level under "all"), frames merged by name and line,
    children in name order. Click to zoom, a search box that highlights matches and sums their
    samples, a tooltip with file:line and percentages (flamegraph.html)."""

    name = "flamegraph"
    extension = ".html"

    def __init__(self, recording, options):
        super().__init__(recording, options)
        self.counts: Dict[tuple, int] = {}

    def add(self, thread, stack, state, t_ns, count) -> None:
        key = (thread, stack)
        self.counts[key] = self.counts.get(key, 0) + count

    def tree(self):
        """(strings, nodes): node = [name index, location index, total samples, parent], preorder."""
        root = {"name": "all", "loc": "", "total": 0, "kids": {}}
        for (thread, stack), n in self.counts.items():
            root["total"] += n
            node = root
            for name, loc in [(r, "") for r in thread.roots] + [(f.label, f"{f.path}:{f.line}" if f.path and f.line else
                                                     (f.path or "")) for f in stack.frames]:
                key = (name, loc)
                kid = node["kids"].get(key)
                if kid is None:
                    kid = node["kids"][key] = {"name": name, "loc": loc, "total": 0, "kids": {}}
                kid["total"] += n
                node = kid
        strings: List[str] = []
        index: Dict[str, int] = {}

        def s(text):
            i = index.get(text)
            if i is None:
                i = index[text] = len(strings)
                strings.append(text)
            return i

        nodes = []
        todo = [(root, -1)]
        while todo:
            node, parent = todo.pop()
            me = len(nodes)
            nodes.append([s(node["name"]), s(node["loc"]), node["total"], max(parent, 0)])
            for key in sorted(node["kids"], reverse=True):   # popped in name order
                todo.append((node["kids"][key], me))
        return strings, nodes

    def render(self, out: IO) -> None:
        h = self.header
        title = f"sdb flame graph: pid {h.get('pid')} {' '.join(h.get('command') or [])}".strip()
        strings, nodes = self.tree()
        data = json.dumps({"title": title, "strings": strings, "nodes": nodes}, separators=(",", ":"),
                          ensure_ascii=False).replace("<", "\\u003c")   # no "</script" or "<!--" inside
        with open(TEMPLATE, encoding="utf-8") as f:
            page = f.read()
        out.write(page.replace("__TITLE__", html.escape(title)).replace("__DATA__", data))
