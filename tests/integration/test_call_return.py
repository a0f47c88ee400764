"""A thread that calls in and out faster than a stack can be copied: the frame pointer read before the
copy and the one read after it differ at most samples (or are equal after a whole round trip), and the
frames the thread has left are still in memory above its live ones, looking valid. No sample may show
them: not those beyond the shallower pointer, not a half-written frame, not a Ruby frame above a C
function that did not call it (Ruby marks what C calls FINISH). tests/programs/call_return.rb knows
each real stack. (A frame left behind above a live *Ruby* frame of the same shape is not caught by
these checks: docs/guide.md, the limits.)"""
from __future__ import annotations

import collections
import os
import signal
import struct

import pytest

from conftest import ebpf_missing, read_trace, samples_so_far, wait_for
from ebpf_wait import wait_for_ebpf
from sdb_sidecar.sampler._registry import Registry
from sdb_symbolize.resolve import Resolver
from sdb_symbolize.labels import LABELS_RUBY
from sdb_trace import iter_samples

pytestmark = pytest.mark.every_ruby

MAGIC_MASK, MAGIC_CFUNC = 0x7fff0001, 0x55550001      # an env's frame magic (vm_core.h)

# callee -> the one caller it has in the program
CALLER = {"Object#leaf_a": "Object#mid_a", "Object#mid_a": "Object#top_a", "Object#top_a": "Object#spin"}
# a C function that calls nothing
LEAVES = {"Kernel#instance_variable_defined?"}


@pytest.mark.parametrize("reads", ["from outside", pytest.param("in context", marks=pytest.mark.skipif(
    bool(ebpf_missing()), reason=f"no eBPF here: {ebpf_missing()}"))])
def test_no_frame_the_thread_left_shows_above_its_live_stack(ruby_target, sidecar_process, tmp_path, reads):
    # GIVEN a program calling a three-deep chain and C functions in turn, as fast as it can
    wrong, leaves, ends = [], collections.Counter(), []
    # WHEN it is recorded at 10 kHz, 20,000 samples at a time, until both kinds of leaf were sampled
    # (the chain is short: 60-400 of 20,000 samples, fewer on a busy machine), at most 6 times (its
    # running stack copied from another CPU, or, with eBPF, on its own: bpf/stack_in_context.c)
    for round_ in range(6):
        target = ruby_target("call_return.rb", "sdb")
        trace = tmp_path / f"trace{round_}.msgpack"
        sidecar = sidecar_process("attach", "--pid", str(target.pid), "-o", str(trace), "--rate", "10000",
                                  "--duration", "600", "-q", *(["--no-ebpf"] if reads == "from outside" else []))
        n0 = 0
        if reads == "in context":   # 20,000 samples after the reads are in (attached before the symbolizer's record)
            wait_for_ebpf(sidecar, trace)
            n0 = samples_so_far(trace)
        wait_for(lambda: samples_so_far(trace) >= n0 + 20_000 or sidecar.poll() is not None, 300,
                 what="20,000 samples")
        target.proc.kill()
        sidecar.communicate(timeout=60)
        t = read_trace(trace)
        ends.append(t.end)
        resolver = Resolver(t.tables, LABELS_RUBY)

        # THEN every sample is a stack the program has: a chain method under its one caller, nothing
        # above a C function that calls no Ruby method
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
        chain = leaves["Object#top_a"] + leaves["Object#mid_a"] + leaves["Object#leaf_a"]
        if chain > 100 and leaves["Kernel#instance_variable_defined?"] > 100:
            break
    # AND both kinds of leaf were sampled (the shape the check is about happened)
    assert chain > 100 and leaves["Kernel#instance_variable_defined?"] > 100, (leaves.most_common(6), ends)
    # AND the reads were the kind asked for
    assert all((e["in_context"] > 0) == (reads == "in context") for e in ends), ends


def test_a_frame_left_above_a_c_function_is_dropped_whatever_the_c_frames_pc(ruby_target, sidecar_process,
                                                                              tmp_path):
    # GIVEN a thread asleep in Kernel#sleep, called after top_a -> mid_a returned: mid_a's frame is
    # still in memory above the C function's
    target = ruby_target("left_above_c.rb")
    reg = Registry(target.registry)
    L = reg.layout
    slot = wait_for(lambda: next(iter(reg.threads()), None), 30, what="the main thread's slot")
    mem = open(f"/proc/{target.pid}/mem", "r+b", buffering=0)

    def u64(addr):
        mem.seek(addr)
        return struct.unpack("<Q", mem.read(8))[0]

    def put(addr, value):
        mem.seek(addr)
        mem.write(struct.pack("<Q", value))

    def in_sleep():
        ec = u64(slot["ec_addr"])
        cfp = u64(ec + L["ec_cfp"])
        ep = u64(cfp + L["cfp_ep"])
        stale = cfp - L["cfp_size"]
        if u64(cfp + L["cfp_iseq"]) == 0 and u64(ep) & MAGIC_MASK == MAGIC_CFUNC \
                and u64(stale + L["cfp_iseq"]) and u64(stale + L["cfp_pc"]):
            return ec, cfp, stale
        return None

    seen = []

    def asleep():
        # the same C frame at the same place over 10 looks 50 ms apart: sleep (puts "ready" is done)
        seen.append(in_sleep())
        return seen[-1] if len(seen) >= 10 and seen[-1] and len(set(seen[-10:])) == 1 else None

    ec, cfp, stale = wait_for(asleep, 30, interval=0.05, what="the thread asleep in Kernel#sleep")
    # AND (the process stopped) the moment a copy can meet: the frame pointer at the left frame,
    # the C frame's pc not 0 (as YJIT leaves it, or as a half-written frame shows it)
    os.kill(target.pid, signal.SIGSTOP)
    try:
        put(cfp + L["cfp_pc"], u64(stale + L["cfp_pc"]))
        put(ec + L["ec_cfp"], stale)
        assert (u64(cfp + L["cfp_pc"]), u64(ec + L["ec_cfp"])) == (u64(stale + L["cfp_pc"]), stale)
        # WHEN it is recorded
        trace = tmp_path / "trace.msgpack"
        sidecar = sidecar_process("attach", "--pid", str(target.pid), "-o", str(trace), "--rate", "1000",
                                  "--duration", "1", "-q", "--no-ebpf")
        sidecar.communicate(timeout=60)
    finally:
        os.kill(target.pid, signal.SIGKILL)
        mem.close()
    t = read_trace(trace)
    resolver = Resolver(t.tables, LABELS_RUBY)
    # THEN no sample shows mid_a above the C function: each read was torn (checked: Ruby marks a
    # frame a C function calls FINISH; mid_a has no such mark), and dropped
    shown = collections.Counter()

    def on_batch(base, dts, threads, sids, states):
        for dt, sid in zip(dts, sids):
            shown[tuple(f.label for f in resolver.stack(sid, base + dt))] += 1

    iter_samples(str(trace), on_batch)
    assert not [s for s in shown if "Object#mid_a" in s], (shown.most_common(4), t.end)
    assert t.end["torn"] > 0, (t.end, shown.most_common(4))
