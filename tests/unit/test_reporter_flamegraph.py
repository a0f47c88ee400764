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


def test_names_cannot_break_out_of_the_page(tmp_path):
    """A label holding `</script>`, `<!--` or HTML stays text: the data block ends where it should
    and the name comes back intact."""
    import subprocess
    import sys

    from sdb_trace import KIND_RUBY, TraceWriter
    nasty = 'evil</script><!--<script>alert(1)</script>&amp;"'
    path = tmp_path / "nasty.msgpack"
    with open(path, "wb") as f:
        w = TraceWriter(f, {"pid": 1, "ruby": "3.1.2", "rate_hz": 1000, "start_mono_ns": 0, "start_wall_ns": 0,
                            "command": ["ruby", "<b>x</b>"], "max_depth": 2048})
        w.thread(1, 1, "main", 0, 1, 0)
        w.iseq(0x10, nasty, nasty, "/app/<i>.rb", None, 1, 1, 0)
        w.frames(0, [KIND_RUBY], [0x10], [0x11], [0], [2])
        w.stacks(0, [[0]])
        w.samples(0, [0, 1000], [1, 1], [0, 0], [1, 1])
        w.end(at_ns=2000, reason="duration")
    html = subprocess.run([sys.executable, "-m", "sdb_symbolize.cli", str(path), "-f", "flamegraph"],
                          capture_output=True, check=True).stdout.decode()
    assert html.count("</script>") == 2 and "<!--<script>" not in html and "<b>x</b>" not in html
    m = re.search(r'<script id="sdb-data" type="application/json">(.*?)</script>', html, re.S)
    doc = json.loads(m.group(1))
    assert nasty in doc["strings"] and "/app/<i>.rb:2" in doc["strings"]
