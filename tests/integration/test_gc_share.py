"""The `(garbage collection)` frame's share on Debian's Ruby 3.1, where the sidecar reads the VM's
GC flag from outside (no hook in the app): a GC-heavy program recorded by sdb while stackprof
(Debian's ruby-stackprof, cpu mode, 1 ms, raw; it asks Ruby `rb_during_gc()` in its own sample; why
not wall mode: tests/programs/gc_beside_stackprof.rb) runs in the same process over the same
seconds. Both see the same collections, so their GC shares agree."""
from __future__ import annotations

import json

import pytest

from conftest import SDB_GEM_HOME, samples_so_far, wait_for
from sdb_trace import KIND_GC, iter_samples, load_tables

pytestmark = pytest.mark.once  # Debian's stackprof is built for Debian's Ruby (3.1) only


def test_gc_share_matches_stackprof_in_the_same_process(ruby_target, sidecar_process, tmp_path):
    # GIVEN a program that allocates without pause on its main thread for 6 s of its CPU time, under
    # stackprof, recorded by sdb (stackprof's CPU timer ticks with the kernel's clock tick: ~250 samples
    # a CPU second here, so 6 s for ~1,500 of them)
    # (a trailing ':' in GEM_PATH keeps RubyGems' default path, where Debian's stackprof is)
    target = ruby_target("gc_beside_stackprof.rb", "6", env={"GEM_PATH": SDB_GEM_HOME + ":"} if SDB_GEM_HOME else None)
    out = tmp_path / "trace.msgpack"
    sidecar = sidecar_process("attach", "--pid", str(target.pid), "-o", str(out), "--duration", "600", "-q",
                              "--no-ebpf")
    wait_for(lambda: samples_so_far(out) > 0 or sidecar.poll() is not None, 60, what="first samples")
    assert sidecar.poll() is None, sidecar.communicate()[1]
    target.send("go\n")
    done = json.loads(target.wait_for_line("done", timeout=300).split(" ", 1)[1])
    sidecar.send_signal(2)
    _, err = sidecar.communicate(timeout=60)
    assert sidecar.returncode == 0, err
    # WHEN the main thread's samples inside stackprof's window are counted
    tables = load_tables(str(out))
    assert tables.error is None, tables.error
    main = [s for s, th in tables.threads.items() if th["tid"] == target.pid]
    assert len(main) == 1, tables.threads
    seen = {"all": 0, "gc": 0}

    def on_batch(base, dts, threads, sids, states):
        for dt, th, sid in zip(dts, threads, sids):
            if th == main[0] and done["t0"] <= base + dt <= done["t1"]:
                seen["all"] += 1
                stack = tables.stacks[sid]
                seen["gc"] += bool(stack) and tables.frame_kind[stack[0]] == KIND_GC

    iter_samples(str(out), on_batch)
    assert seen["all"] > 1000 and done["samples"] > 1000, (seen, done)
    sdb_share = 100.0 * seen["gc"] / seen["all"]
    stackprof_share = 100.0 * done["gc_samples"] / done["samples"]
    print(f"GC share: sdb {sdb_share:.1f}% of {seen['all']} samples, stackprof {stackprof_share:.1f}% of {done['samples']}")
    # THEN GC is a real share of the time for both, and sdb's is within 5 points of stackprof's
    assert stackprof_share > 10, (stackprof_share, done)
    assert abs(sdb_share - stackprof_share) <= 5, (f"sdb {sdb_share:.1f}% ({seen}), "
                                                   f"stackprof {stackprof_share:.1f}% ({done})")
