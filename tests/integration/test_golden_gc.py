"""`(garbage collection)`: samples of the thread that runs GC, taken while the VM is in GC.

On Ruby 3.3+ the gem keeps a word in the registry header set from Ruby's GC_ENTER/GC_EXIT hooks; on
3.1 the sidecar reads the VM's own objspace->flags.during_gc and the main ractor's running ec with
the stacks (no hook: it would slow every allocation there). The sampler puts a `(garbage
collection)` frame (kind 4) on top of the stack of the thread holding the GVL while the VM is in GC
(docs/internals.md, "GC: the `(garbage collection)` frame")."""
from __future__ import annotations

import pytest

from conftest import run_sidecar
from sdb_symbolize.resolve import Resolver
from sdb_symbolize.labels import GC_LABEL
from sdb_trace import KIND_GC, iter_samples, load_tables

pytestmark = pytest.mark.every_ruby


def record(ruby_target, tmp_path, mode: str):
    target = ruby_target("gc_churn.rb", mode)
    out = tmp_path / f"{mode}.msgpack"
    result = run_sidecar("attach", "--pid", str(target.pid), "-r", "1000", "-d", "1", "-o", str(out), "--quiet")
    assert result.returncode == 0, result.stderr
    tables = load_tables(str(out))
    assert tables.error is None, tables.error
    churner = [s for s, th in tables.threads.items() if th["name"] == "churner"]
    assert len(churner) == 1, tables.threads
    samples = []

    def on_batch(base, dts, threads, sids, states):
        samples.extend((base + dt, sid) for dt, th, sid in zip(dts, threads, sids) if th == churner[0])

    iter_samples(str(out), on_batch)
    assert len(samples) > 300, f"only {len(samples)} samples of the churner"
    return tables, samples


def in_gc(tables, sid) -> bool:
    stack = tables.stacks[sid]
    return bool(stack) and tables.frame_kind[stack[0]] == KIND_GC


def test_allocating_thread_has_samples_in_gc(ruby_target, tmp_path):
    # GIVEN a thread that allocates without pause (minor GCs all the time, on that thread)
    tables, samples = record(ruby_target, tmp_path, "churn")
    gc = [(t, sid) for t, sid in samples if in_gc(tables, sid)]
    # THEN some of its samples carry the GC frame, innermost, over the Ruby stack that allocated
    assert gc, f"no sample in GC among {len(samples)}"
    assert len(gc) < len(samples), "every sample in GC"
    resolver = Resolver(tables)
    labels = [f.label for f in reversed(resolver.stack(gc[0][1], gc[0][0]))]
    assert labels[0] == GC_LABEL, labels
    assert "Object#churn" in labels, labels
    # and GC frames are nowhere but on top
    for stack in tables.stacks:
        assert all(tables.frame_kind[f] != KIND_GC for f in stack[1:]), stack


def test_sleeping_thread_has_no_sample_in_gc(ruby_target, tmp_path):
    # GIVEN the same thread asleep
    tables, samples = record(ruby_target, tmp_path, "sleep")
    # THEN none of its samples is in GC
    assert not [sid for _t, sid in samples if in_gc(tables, sid)]
