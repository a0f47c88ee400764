"""A name read for an address holds only where it is proven: symbols resolved by time never lend a
later (or earlier) ISeq's name to a sample, and a symbol that starts while a sample's frames were
being copied names nothing in that sample."""
from __future__ import annotations

from sdb_trace import Symbol, Tables


def tables_with(addr_symbols):
    t = Tables(header={})
    for addr, syms in addr_symbols.items():
        t.iseqs[addr] = [Symbol(at, label, "", 0, "ebpf", {"label": label}) for at, label in syms]
    return t


def test_an_address_named_once_names_every_sample_of_it():
    t = tables_with({0x10: [(500, "once")]})
    assert t.symbol_at(t.iseqs, 0x10, 100).label == "once"
    assert t.symbol_at(t.iseqs, 0x10, 900, 400).label == "once"


def test_a_reused_address_names_each_sample_by_the_symbol_holding_at_its_time():
    t = tables_with({0x10: [(100, "first"), (200, "second")]})
    assert t.symbol_at(t.iseqs, 0x10, 150).label == "first"
    assert t.symbol_at(t.iseqs, 0x10, 250).label == "second"


def test_a_sample_older_than_every_name_of_a_reused_address_is_unnamed():
    # GIVEN an address named twice, both after the sample: the sample's ISeq is neither of them
    t = tables_with({0x10: [(100, "first"), (200, "second")]})
    assert t.symbol_at(t.iseqs, 0x10, 50) is None


def test_a_name_born_while_the_frames_were_copied_names_nothing():
    # GIVEN a sample whose frames were copied somewhere between 140 and 220, and the address reused at 200
    t = tables_with({0x10: [(100, "first"), (200, "second")]})
    # THEN neither name is proven for it
    assert t.symbol_at(t.iseqs, 0x10, 220, 140) is None
    # AND a window wholly after (or before) the reuse is named
    assert t.symbol_at(t.iseqs, 0x10, 260, 200).label == "second"
    assert t.symbol_at(t.iseqs, 0x10, 199, 120).label == "first"
