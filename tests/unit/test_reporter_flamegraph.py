"""flamegraph: one self-contained HTML file (nothing fetched: no src/href to anything), its
embedded tree holding every sample (tests/integration/test_format_browser.py opens it)."""
from __future__ import annotations

import json
import re

import pytest

from format_recording import expected_per_thread, formats_trace, symbolize

pytestmark = pytest.mark.once


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    path, trace = formats_trace(tmp_path_factory)
    return symbolize(path, "flamegraph", "--idle").stdout.decode(), trace


def test_the_page_loads_nothing_from_anywhere(page):
    html, _ = page
    assert not re.search(r"""\b(src|href)\s*=|@import|url\(|https?://(?!www\.w3\.org)""", html, re.I)


def test_the_tree_holds_every_sample_and_children_fit_in_parents(page):
    html, trace = page
    m = re.search(r'<script id="sdb-data" type="application/json">(.*?)</script>', html, re.S)
    doc = json.loads(m.group(1))
    nodes, strings = doc["nodes"], doc["strings"]
    assert strings[nodes[0][0]] == "all" and nodes[0][2] == len(trace.samples)
    kids = {}
    for i, (_, _, total, parent) in enumerate(nodes[1:], 1):
        assert parent < i
        kids[parent] = kids.get(parent, 0) + total
    assert all(kids[p] <= nodes[p][2] for p in kids)
    threads = {strings[n[0]]: n[2] for n in nodes[1:] if n[3] == 0}
    assert threads == expected_per_thread(trace)
    locs = {strings[n[1]] for n in nodes if "format_crunch_step" in strings[n[0]]}
    assert locs and all(re.search(r"formats\.rb:\d+$", l) for l in locs)
