"""The left-right map (sidecar/sdb_sidecar/_leftright.pyx): readers without locks or the GIL never see
a half-written entry, and never miss one that was published.

Groundwork for issue #4: the eBPF symbolizer's thread will write named ISeqs into it, the sampler's
nogil loop will read it."""
from __future__ import annotations

import pytest

from sdb_sidecar import _leftright

pytestmark = pytest.mark.once  # nothing here depends on the Ruby under test


def test_map_returns_what_was_put_through_growth():
    m = _leftright.LeftRightMap(4)
    for k in range(1, 20000):
        m.put(k, k * 3)
    assert len(m) == 19999
    assert all(m.lookup(k) == k * 3 for k in range(1, 20000))
    assert m.lookup(10**9) is None
    m.put(7, 1)                      # overwrite
    assert m.lookup(7) == 1 and len(m) == 19999


def test_readers_without_the_gil_never_see_a_torn_or_missing_entry_while_a_writer_grows_the_map():
    # GIVEN one writer publishing keys in batches (the table grows many times) and three readers
    # looking up random published keys, all in native threads without the GIL
    r = _leftright.stress(readers=3, seconds=2.0, nkeys=1_000_000, batch=256)
    # THEN millions of reads, every value matching its key, every published key found
    assert r["reads"] > 2_000_000, r
    assert r["writes"] > 100_000, r
    assert r["torn"] == 0, r
    assert r["missing"] == 0, r
    assert r["keys"] == r["writes"], r
