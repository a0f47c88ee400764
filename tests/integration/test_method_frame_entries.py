"""A frame of a method's ISeq (`def`) carries that method's entry, or is not sampled: Ruby pushes every
such frame with its method's entry in the frame's env words, but copied from outside the env words
are read after the control frames (in a second call when they lie outside the last read's window),
and a frame replaced at the same depth in between leaves there a class body's cref (no entry), a C
function's entry, or stack values. Sampled so, the method's frames read without their class
(rubocop's `begins_its_line?`, `inverse_block?` in the real-program check) wherever no other frame
of the ISeq lent its entry; such a read is torn and read again."""
from __future__ import annotations

import pytest

import collections

from conftest import read_trace, samples_so_far, wait_for
from sdb_trace import ISEQ_TYPE_METHOD, KIND_RUBY, METHOD_ISEQ, iter_samples

pytestmark = pytest.mark.every_ruby

METHODS = ("down", "work", "brief")


def test_a_methods_frame_is_sampled_with_its_own_entry_or_not_at_all(ruby_target, sidecar_process, tmp_path):
    # GIVEN methods replaced at once at the same depth by a class body and a C function, each time
    # at another depth
    target = ruby_target("same_depth.rb", "sdb")
    trace = tmp_path / "trace.msgpack"
    # WHEN it is recorded from outside (no eBPF: no in-context reads) at 5 kHz until 20,000 samples
    sidecar = sidecar_process("attach", "--pid", str(target.pid), "-o", str(trace), "--rate", "5000",
                              "--duration", "600", "--no-ebpf", "-q")
    wait_for(lambda: samples_so_far(trace) >= 20_000 or sidecar.poll() is not None, 300, what="20,000 samples")
    target.proc.kill()
    sidecar.communicate(timeout=60)
    t = read_trace(trace)
    tables = t.tables
    found = collections.Counter()

    def on_batch(base, dts, threads, sids, states):
        for dt, sid in zip(dts, sids):
            for fid in tables.stacks[sid]:
                if tables.frame_kind[fid] != KIND_RUBY:
                    continue
                sym = tables.symbol_at(tables.iseqs, tables.frame_iseq[fid], base + dt)
                if sym is None or sym.record.get("type") != ISEQ_TYPE_METHOD:
                    continue
                me = tables.frame_me[fid]
                m = tables.symbol_at(tables.cfuncs, me, base + dt) if me else None
                if me == 0:
                    found[("no entry", sym.record["label"])] += 1
                elif m is None:
                    found[("an unnamed entry", sym.record["label"])] += 1
                elif m.record.get("type") != METHOD_ISEQ or m.record.get("name") != sym.record.get("base_label"):
                    found[("another's entry", sym.record["label"], m.label)] += 1
                else:
                    found[("its entry", sym.record["label"])] += 1
    iter_samples(str(trace), on_batch)
    # THEN every sampled frame of a method's ISeq carries that method's own entry (without the
    # check, 3.1: ~7,000 of 380,000 carried none)
    wrong = {k: n for k, n in found.items() if k[0] != "its entry"}
    assert not wrong, (wrong, t.end)
    # AND the methods were sampled, every one of them
    assert all(found[("its entry", m)] > 10 for m in METHODS), (found, t.end)
