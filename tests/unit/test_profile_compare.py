"""The real-program check's comparison (tests/profile_compare.py) passes two profiles that agree and
fails when sdb names frames wrongly: the check can fail."""
from __future__ import annotations

import random

import pytest

from profile_compare import GC, compare_self, fold, spearman

pytestmark = pytest.mark.once

# A profile shaped like asciidoctor's: GC first, then a long tail of methods and C functions
METHODS = ["Asciidoctor::Parser.next_block", "Regexp#match?", "Asciidoctor::Parser.parse_table", "Regexp#match",
           "Asciidoctor::Table::ParserContext#close_cell", "Asciidoctor::Parser.parse_list", "Class#new",
           "Asciidoctor::Parser.read_lines_for_list_item", "Kernel#require_relative", "Asciidoctor::Parser.next_section",
           "Asciidoctor::Parser.is_sibling_list_item?", "Asciidoctor::AbstractBlock#initialize",
           "Asciidoctor::AbstractNode#initialize", "Asciidoctor::Parser.parse_list_item", "Hash#update",
           "Asciidoctor::Reader#peek_line", "String#rstrip", "Asciidoctor::Reader#shift", "String#each_line",
           "Asciidoctor::PreprocessorReader#process_line", "Integer#upto", "Asciidoctor::Reader#read_line",
           "String#include?", "Kernel#require", "Symbol#to_s"]
SAMPLES = 20_000


def profile(seed: int, names=METHODS) -> dict:
    """SAMPLES samples drawn from a fixed distribution (GC 25 %, then shares falling as 1/rank)."""
    rng = random.Random(seed)
    weights = [25.0] + [20.0 / (i + 1) for i in range(len(names))]
    labels = [GC] + list(names)
    out: dict = {}
    for label in rng.choices(labels, weights, k=SAMPLES):
        out[label] = out.get(label, 0) + 1
    return out


def test_spearman_of_a_ranking_with_itself_and_reversed():
    assert spearman([5, 4, 3, 2, 1], [50, 40, 30, 20, 10]) == pytest.approx(1.0)
    assert spearman([5, 4, 3, 2, 1], [1, 2, 3, 4, 5]) == pytest.approx(-1.0)
    # ties share their mean rank
    assert spearman([3, 3, 1], [2, 2, 1]) == pytest.approx(1.0)


def test_stackprof_gc_phases_fold_into_sdbs_gc_frame():
    assert {fold(l) for l in ("(garbage collection)", "(marking)", "(sweeping)")} == {GC}
    assert fold("Array#join") == "Array#join"


def test_two_samplings_of_one_program_agree():
    # GIVEN two independent samplings of the same distribution, as two profilers of one run would see it
    c = compare_self(profile(1), profile(2))
    # THEN they agree: rank correlation well above 0.9, no label lost its class
    assert c.problems() == [], c.problems()
    assert c.rho > 0.95


def test_frames_named_after_the_wrong_method_fail():
    # GIVEN sdb's profile in which the names of the top methods are rotated: each method's samples
    # carry another method's name (a naming path that gives frames their neighbour's name)
    sdb = profile(2)
    names = [n for n in METHODS[:12]]
    rotated = {old: new for old, new in zip(names, names[1:] + names[:1])}
    sdb = {rotated.get(k, k): v for k, v in sdb.items()}
    # THEN the rank correlation falls below 0.9 and the comparison fails
    c = compare_self(profile(1), sdb)
    assert c.rho < 0.9
    assert c.problems() and "Spearman" in c.problems()[0]


def test_samples_moved_from_short_callees_to_their_callers_fail():
    # GIVEN sdb's profile in which most samples of the methods stackprof ranks 2nd-10th went to the
    # method ranked 11th-19th instead (a sampler that charges a callee's time to its caller)
    sp = profile(1)
    sdb = dict(profile(2))
    for callee, caller in zip(METHODS[1:10], METHODS[10:19]):
        moved = int(sdb[callee] * 0.8)
        sdb[callee] -= moved
        sdb[caller] += moved
    # THEN the comparison fails
    assert compare_self(sp, sdb).problems()


def test_a_method_without_its_class_fails():
    # GIVEN sdb's profile in which one top method is named bare (its frames' class lost)
    sdb = profile(2)
    sdb["parse_table"] = sdb.pop("Asciidoctor::Parser.parse_table")
    c = compare_self(profile(1), sdb)
    # THEN the comparison names it, whatever the rank correlation says
    assert [(n, sp) for n, _, sp in c.unqualified] == [("parse_table", "Asciidoctor::Parser.parse_table")]
    assert any("'parse_table'" in p for p in c.problems())


def test_one_sample_without_its_class_fails_too():
    # GIVEN sdb's profile in which a single sample of a method outside the top is named bare
    sdb = profile(2)
    sdb["Symbol#to_s"] -= 1
    sdb["to_s"] = 1
    # THEN that fails as well: no label of sdb's may lack the class stackprof gives its method
    assert [(n, sp) for n, _, sp in compare_self(profile(1), sdb).unqualified] == [("to_s", "Symbol#to_s")]


def test_a_bare_label_stackprof_has_bare_too_passes():
    # GIVEN a label both profilers give without a class (top-level code, a class body)
    sp, sdb = profile(1), profile(2)
    for p in (sp, sdb):
        p["<top (required)>"] = 50
    # THEN it is not counted as a lost class
    assert compare_self(sp, sdb).unqualified == []
