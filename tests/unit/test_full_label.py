"""sdb_trace.full_label, the one label rule: Ruby's full labels, and never another method's name."""
from __future__ import annotations

import pytest

from sdb_symbolize.labels import LABELS_RUBY, full_label
from sdb_trace import KIND_CFUNC, KIND_RUBY, METHOD_CFUNC, METHOD_ISEQ

pytestmark = pytest.mark.once

PRICE = {"name": "price", "type": METHOD_ISEQ, "class_path": "Product", "singleton": False}


def iseq(label, base, itype):
    return {"label": label, "base_label": base, "type": itype}


def test_a_method_frame_is_named_with_its_class():
    assert full_label(KIND_RUBY, iseq("price", "price", 1), PRICE) == "Product#price"
    assert full_label(KIND_RUBY, iseq("block (2 levels) in price", "price", 2), PRICE) == \
        "block (2 levels) in Product#price"


def test_a_method_entry_of_another_method_never_lends_its_name():
    # GIVEN a frame of in_stock? paired (by a read while the stack moved) with price's method entry
    # THEN the frame keeps its own label, unqualified, rather than Product#price
    assert full_label(KIND_RUBY, iseq("in_stock?", "in_stock?", 1), PRICE) == "in_stock?"
    assert full_label(KIND_RUBY, iseq("block in in_stock?", "in_stock?", 2), PRICE) == "block in in_stock?"


def test_an_eval_inside_a_method_keeps_the_method_name():
    # eval ISeqs carry no method name to check against: Ruby names them after the method
    assert full_label(KIND_RUBY, iseq("eval", "eval", 6), PRICE) == "Product#price"


def test_ruby_profile_frames_labels_name_a_methods_blocks_after_the_method_alone():
    # GIVEN --labels ruby-profile-frames THEN a method's block, rescue, ensure: the method's qualified
    # name (rb_profile_frame_full_label's string); frames without a method keep their prefix
    assert full_label(KIND_RUBY, iseq("block (2 levels) in price", "price", 2), PRICE, LABELS_RUBY) == \
        "Product#price"
    assert full_label(KIND_RUBY, iseq("rescue in price", "price", 4), PRICE, LABELS_RUBY) == "Product#price"
    assert full_label(KIND_RUBY, iseq("block in <main>", "<main>", 2), None, LABELS_RUBY) == "block in <main>"
    # AND another method's entry still never lends its name
    assert full_label(KIND_RUBY, iseq("block in in_stock?", "in_stock?", 2), PRICE, LABELS_RUBY) == \
        "block in in_stock?"


def test_a_c_functions_frame_with_a_def_methods_entry_is_left_unnamed():
    # GIVEN a C function's frame whose method entry is a `def` method's (a read while the frame at that
    # depth changed: the sampler refuses those; a trace from before it did not)
    # THEN no name: Ruby pushes a C frame only with its C method's entry
    assert full_label(KIND_CFUNC, None, PRICE) == "(C function)"
    new = {"name": "new", "type": METHOD_CFUNC, "class_path": "Class", "singleton": False}
    assert full_label(KIND_CFUNC, None, new) == "Class#new"
