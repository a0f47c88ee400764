"""Which ISeqs' frames Ruby's backtraces show as a C method's (located at their Ruby caller), as the
layout rows in use say (symbols.shown_as_c_method, from each row's builtin_attr_c_trace and
internal_path_c_trace, generated from each Ruby's vm_backtrace.c: docs/ruby-internals.md)."""
from __future__ import annotations

import pytest

from conftest import load_layoutgen
from sdb_sidecar.target.symbols import shown_as_c_method

gen = load_layoutgen()

pytestmark = pytest.mark.once

ROWS = gen.rows_in_use()
INTERNAL, APP = "<internal:kernel>", "/app/lib/internal.rb"


def test_from_40_every_iseq_of_an_internal_file_is_shown_as_a_c_method():
    L = ROWS["4.0"]
    assert shown_as_c_method(L, INTERNAL) and shown_as_c_method(L, "<internal:numeric>", 0)
    assert not shown_as_c_method(L, APP) and not shown_as_c_method(L, "/app/<internal:x>.rb", 0)


def test_on_34_only_a_method_marked_c_trace_is():
    L = ROWS["3.4"]
    assert not shown_as_c_method(L, INTERNAL) and not shown_as_c_method(L, INTERNAL, 0)
    assert shown_as_c_method(L, "<internal:array>", L["builtin_attr_c_trace"])


@pytest.mark.parametrize("name", ["3.1", "3.3"])
def test_before_34_none_is(name):
    assert not shown_as_c_method(ROWS[name], INTERNAL)
