"""sdb_symbolize.resolve: a Ruby frame whose method entry was read while the stack moved (another
frame's entry, or none) is named after the method every other frame of its ISeq agrees on."""
from __future__ import annotations

import pytest

from sdb_symbolize.resolve import Resolver
from sdb_trace import KIND_RUBY, METHOD_ISEQ, Tables

pytestmark = pytest.mark.once

ISEQ, IN_STOCK, PRICE, OTHER = 0x1000, 0x2000, 0x3000, 0x4000


def tables(frame_mes) -> Tables:
    t = Tables(header={})
    records = [
        {"t": "iseq", "addr": ISEQ, "at_ns": 0, "label": "in_stock?", "base_label": "in_stock?", "type": 1,
         "path": "app/models/product.rb", "first_line": 3, "source": "ebpf"},
        {"t": "method", "me": IN_STOCK, "at_ns": 0, "name": "in_stock?", "type": METHOD_ISEQ,
         "class_path": "Product", "singleton": False, "source": "remote"},
        {"t": "method", "me": PRICE, "at_ns": 0, "name": "price", "type": METHOD_ISEQ,
         "class_path": "Product", "singleton": False, "source": "remote"},
        {"t": "method", "me": OTHER, "at_ns": 0, "name": "in_stock?", "type": METHOD_ISEQ,
         "class_path": "Warehouse", "singleton": False, "source": "remote"},
    ]
    for rec in records:
        table, addr, sym = t.symbol_of(rec)
        table.setdefault(addr, []).append(sym)
    for me in frame_mes:
        t.frame_kind.append(KIND_RUBY)
        t.frame_iseq.append(ISEQ)
        t.frame_pc.append(0)
        t.frame_me.append(me)
        t.frame_line.append(4)
    return t


def labels(t: Tables):
    r = Resolver(t)
    return [r.frame(fid, 10, None).label for fid in range(len(t.frame_kind))]


def test_a_frame_with_another_methods_entry_or_none_takes_the_entry_the_other_frames_of_its_iseq_agree_on():
    # GIVEN frames of in_stock?: one with its own entry, one read with price's, one with none
    # THEN all three are Product#in_stock? (never Product#price)
    assert labels(tables([IN_STOCK, PRICE, 0])) == ["Product#in_stock?"] * 3


def test_no_entry_is_borrowed_when_the_frames_disagree_or_none_fits():
    # GIVEN the same ISeq seen under two fitting entries (an alias in another class, say)
    # THEN a frame with a foreign entry stays unqualified rather than pick one
    assert labels(tables([IN_STOCK, OTHER, PRICE])) == ["Product#in_stock?", "Warehouse#in_stock?", "in_stock?"]
    # AND with no fitting entry anywhere, nothing is borrowed
    assert labels(tables([PRICE, 0])) == ["in_stock?", "in_stock?"]
