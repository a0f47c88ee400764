"""A frame whose env Ruby moved to the heap (a block of its method became a Proc) is sampled like any
other: the caller/callee link the sampler checks (ep = caller's sp + locals + 3) does not apply to
it. Before, every read of such a stack was dropped as torn: a Sidekiq job (Processor#dispatch hands
its blocks to methods taking &block) was never sampled."""
from __future__ import annotations

import pytest

from conftest import read_trace, record_program

pytestmark = pytest.mark.every_ruby


def test_a_stack_under_a_method_whose_env_escaped_is_sampled_and_not_torn(tmp_path):
    trace = read_trace(record_program(tmp_path, "escaped_env.rb", duration_s=1.5))
    ticks, torn = trace.end["ticks"], trace.end["torn"]
    spinning = [s for s in trace.samples if "spin_below" in trace.labels_of(s)]
    # the stack under it, whole: the method whose env escaped and its callers are there
    assert spinning and all("with_escaped_env" in trace.labels_of(s) and "run_it" in trace.labels_of(s)
                            for s in spinning)
    assert torn <= 0.1 * ticks, (torn, ticks)
    assert len(spinning) >= 0.5 * ticks, (len(spinning), ticks)
