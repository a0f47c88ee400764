"""A thread that calls in and out faster than a stack can be copied: the frame pointer read before the
copy and the one read after it differ at most samples (or are equal after a whole round trip), and the
frames the thread has left are still in memory above its live ones, looking valid. No sample may show
them: not those beyond the shallower pointer, not a half-written frame, not a Ruby frame above a C
function that did not call it (Ruby marks what C calls FINISH). tests/programs/call_return.rb knows
each real stack. (A frame left behind above a live *Ruby* frame of the same shape is not caught by
these checks: README, "Limits".)"""
from __future__ import annotations

import collections

from conftest import read_trace, samples_so_far, wait_for
from sdb_symbolize.resolve import Resolver
from sdb_symbolize.labels import LABELS_RUBY
from sdb_trace import iter_samples

# callee -> the one caller it has in the program
CALLER = {"Object#leaf_a": "Object#mid_a", "Object#mid_a": "Object#top_a", "Object#top_a": "Object#spin"}
# a C function that calls nothing
LEAVES = {"Kernel#instance_variable_defined?"}


def test_no_frame_the_thread_left_shows_above_its_live_stack(ruby_target, sidecar_process, tmp_path):
    # GIVEN a program calling a three-deep chain and C functions in turn, as fast as it can
    target = ruby_target("call_return.rb", "sdb")
    trace = tmp_path / "trace.msgpack"
    # WHEN it is recorded at 10 kHz until 20,000 samples are in
    sidecar = sidecar_process("attach", "--pid", str(target.pid), "-o", str(trace), "--rate", "10000",
                              "--duration", "600", "-q", "--no-ebpf")
    wait_for(lambda: samples_so_far(trace) >= 20_000 or sidecar.poll() is not None, 300, what="20,000 samples")
    target.proc.kill()
    sidecar.communicate(timeout=60)
    t = read_trace(trace)
    resolver = Resolver(t.tables, LABELS_RUBY)
    # THEN every sample is a stack the program has: a chain method under its one caller, nothing
    # above a C function that calls no Ruby method
    wrong, leaves = [], collections.Counter()

    def on_batch(base, dts, threads, sids, states):
        for dt, sid in zip(dts, sids):
            labels = [f.label for f in resolver.stack(sid, base + dt)]      # root first
            leaves[labels[-1] if labels else None] += 1
            for i, label in enumerate(labels):
                if (label in CALLER and (i == 0 or labels[i - 1] != CALLER[label])) or \
                        (label in LEAVES and i != len(labels) - 1):
                    wrong.append(labels[-5:])
                    break

    iter_samples(str(trace), on_batch)
    assert wrong == [], f"{len(wrong)} stacks that never existed, e.g. {collections.Counter(map(tuple, wrong)).most_common(4)}; {t.end}"
    # AND both kinds of leaf were sampled (the shape the check is about happened)
    chain = leaves["Object#top_a"] + leaves["Object#mid_a"] + leaves["Object#leaf_a"]
    assert chain > 100 and leaves["Kernel#instance_variable_defined?"] > 100, (leaves.most_common(6), t.end)
