"""flamegraph and firefox keep stacks as byte strings (reporters/prefixes.py), never as a tree of
objects: on random stacks, sharing prefixes or not, their trees equal the ones a plain
dictionary-of-children tree gives (the way both formats built them before issue 44)."""
from __future__ import annotations

import json
import random
import re
from array import array
from io import StringIO

import pytest

from sdb_symbolize.reporters.firefox import STATE_CATEGORY, _Thread
from sdb_symbolize.options import ProfileOptions
from sdb_symbolize.reporters.base import Recording
from sdb_symbolize.reporters.flamegraph import FlamegraphReporter
from sdb_symbolize.reporters.prefixes import StackTable
from sdb_symbolize.resolve import Frame
from sdb_symbolize.samples import Stack

pytestmark = pytest.mark.once


class _T:
    def __init__(self, label):
        self.roots = (label,)


def random_stacks(rnd, n, depth):
    """n stacks from a few frames: some extend or branch off others (shared prefixes), some are
    random all the way (none), some repeat."""
    frames = [Frame(f"m{i % 5}", f"/a/{i % 3}.rb" if i % 4 else None, i % 7) for i in range(12)]
    out = []
    for _ in range(n):
        if out and rnd.random() < 0.5:
            base = rnd.choice(out)
            cut = rnd.randrange(len(base) + 1)
            st = base[:cut] + tuple(rnd.choice(frames) for _ in range(rnd.randrange(depth)))
        else:
            st = tuple(rnd.choice(frames) for _ in range(rnd.randrange(depth)))
        out.append(st)
    return out


def reference_flamegraph(counts):
    """The tree as nested dicts, children in (name, location) order, preorder: what it was."""
    root = {"name": "all", "loc": "", "total": 0, "kids": {}}
    for (thread, stack), n in counts.items():
        root["total"] += n
        node = root
        for name, loc in [(r, "") for r in thread.roots] + [(f.label, f"{f.path}:{f.line}" if f.path and f.line
                                                               else (f.path or "")) for f in stack.frames]:
            kid = node["kids"].setdefault((name, loc), {"name": name, "loc": loc, "total": 0, "kids": {}})
            kid["total"] += n
            node = kid
    strings, index, nodes = [], {}, []

    def s(text):
        if text not in index:
            index[text] = len(strings)
            strings.append(text)
        return index[text]

    todo = [(root, -1)]
    while todo:
        node, parent = todo.pop()
        me = len(nodes)
        nodes.append([s(node["name"]), s(node["loc"]), node["total"], max(parent, 0)])
        for key in sorted(node["kids"], reverse=True):
            todo.append((node["kids"][key], me))
    return strings, nodes


def flamegraph(header):
    return FlamegraphReporter(Recording(header), ProfileOptions(format="flamegraph"))


@pytest.mark.parametrize("seed", range(6))
def test_the_flame_graph_of_random_stacks_is_the_dictionary_tree(seed):
    rnd = random.Random(seed)
    threads = [_T("thread a"), _T("thread b")]
    r = flamegraph({"pid": 1, "command": ["ruby", "x.rb"]})
    for i, st in enumerate(random_stacks(rnd, 60, 40)):
        r.add(rnd.choice(threads), Stack(i, st), 0, None, rnd.randrange(1, 5))
    buf = StringIO()
    r.render(buf)
    doc = json.loads(re.search(r'<script id="sdb-data" type="application/json">(.*?)</script>',
                               buf.getvalue(), re.S).group(1))
    strings, nodes = reference_flamegraph(r.counts)
    assert (doc["strings"], doc["nodes"]) == (strings, nodes)


def test_a_flame_graph_of_no_samples_is_its_root_alone():
    buf = StringIO()
    flamegraph({"pid": 1}).render(buf)
    doc = json.loads(re.search(r'type="application/json">(.*?)</script>', buf.getvalue(), re.S).group(1))
    assert doc["strings"] == ["all", ""] and doc["nodes"] == [[0, 1, 0, 0]]


def test_a_command_naming_the_data_placeholder_stays_in_the_title():
    """`__DATA__` in the command is the title's text, not where the tree goes a second time."""
    buf = StringIO()
    flamegraph({"pid": 1, "command": ["ruby", "__DATA__"]}).render(buf)
    page = buf.getvalue()
    assert "<title>sdb flame graph: pid 1 ruby __DATA__</title>" in page and page.count('"nodes":') == 1


@pytest.mark.parametrize("seed", range(6))
def test_the_firefox_stack_table_of_random_stacks_is_the_dictionary_tree(seed):
    """Rows in first-use order, each (prefix, frame, category) once, each sample's leaf row: as a
    dictionary keyed by (prefix, frame, category) gives them, with checkpoints every 3 rows so the
    walk up from one is exercised."""
    rnd = random.Random(seed)
    old = StackTable.CHECKPOINT
    StackTable.CHECKPOINT = 3
    try:
        th = _Thread(None)
        ref_ids, ref_rows = {}, []
        stacks = [Stack(i, st) for i, st in enumerate(random_stacks(rnd, 80, 30))]
        for _ in range(300):
            stack, state = rnd.choice(stacks), rnd.choice([0, 1, 2, 3, 9])
            got = th.stack(stack, state)
            # the reference, from the frame numbers the thread gave
            cat = STATE_CATEGORY.get(state, 4)
            i = -1
            if stack.frames:
                path = [th.frame(stack.frames[0], cat)] + [th.frame(f) for f in stack.frames[1:]]
                for fr in path:
                    row = (i if i >= 0 else None, fr, cat)
                    if row not in ref_ids:
                        ref_ids[row] = len(ref_rows)
                        ref_rows.append(row)
                    i = ref_ids[row]
            assert got == i
        t = th.stack_table
        rows = [(p if p >= 0 else None, f, c) for p, f, c in zip(t.prefix, t.frame, t.category)]
        assert rows == ref_rows
    finally:
        StackTable.CHECKPOINT = old


def test_a_stack_table_row_is_shared_by_every_path_through_it():
    t = StackTable()
    a = t.add(array("I", [1, 2, 3]), 1)
    b = t.add(array("I", [1, 2, 4]), 1)
    c = t.add(array("I", [1, 2]), 1)
    assert (a, b, c) == (2, 3, 1) and list(t.prefix) == [-1, 0, 1, 1]
    assert t.add(array("I", [1, 2, 3]), 1) == a and len(t) == 4
