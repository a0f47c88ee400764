"""The eBPF symbolizer's overhead governor: creation probes that fire faster than --ebpf-max-rate are
detached for a while (ISeqs born then are named by remote reads) and attached again afterwards."""
from __future__ import annotations

import json

import pytest

from conftest import read_trace
from ebpf_wait import wait_for_ebpf
from sdb_trace import KIND_RUBY, TraceError, TraceReader

from test_ebpf_symbolizer import ebpf_missing

pytestmark = pytest.mark.skipif(bool(ebpf_missing()), reason=f"no eBPF here: {ebpf_missing()}")

DETACH_MARGIN_NS = 50_000_000    # a pause's time is taken just before its probes are detached
ATTACH_MARGIN_NS = 50_000_000    # and its end just after they are attached again (the safe side for names):
                                 # an ISeq born in the last moments of a pause may have been probed


def pause_records(path) -> list:
    """The ebpf_pause / ebpf_resume records of a trace still being written."""
    out = []
    try:
        with TraceReader(str(path)) as r:
            for rec in r.records():
                if rec["t"] in ("ebpf_pause", "ebpf_resume"):
                    out.append(rec)
    except TraceError:
        pass        # the last record is still being written
    return out


def sampled_names(trace, names) -> dict:
    """{method name: samples whose Ruby frames, resolved at the sample's time, name it}."""
    t = trace.tables
    out = {n: 0 for n in names}
    for t_ns, _serial, sid, _state in trace.samples:
        for fid in t.stacks[sid]:
            if t.frame_kind[fid] == KIND_RUBY:
                sym = t.symbol_at(t.iseqs, t.frame_iseq[fid], t_ns)
                if sym is not None and sym.label in out:
                    out[sym.label] += 1
    return out


def test_burst_pauses_the_probes_and_slow_creation_is_probed_again(ruby_target, sidecar_process, tmp_path):
    # GIVEN a Ruby app recorded with eBPF at the default budget (5,000 ISeqs/s)
    target = ruby_target("eval_burst.rb")
    out = tmp_path / "trace.msgpack"
    sidecar = sidecar_process("attach", "--pid", str(target.pid), "-o", str(out), "--duration", "600", "-q")
    # sampling starts at once; eBPF is compiled and attached beside it: these tests are about eBPF naming
    wait_for_ebpf(sidecar, out)
    # WHEN it evaluates methods one eval each for 0.8 s (tens of thousands of ISeqs a second), runs some
    target.send("burst 0.8\n")
    burst = json.loads(target.wait_for_line("burst ", timeout=30)[6:])
    # AND, once the probes are back (a backoff of at most 4 s, then an attach: slower under load),
    # evaluates 5 methods at 10 a second and runs them
    wait_for_ebpf(sidecar, lambda: (lambda recs: recs and recs[-1]["t"] == "ebpf_resume")(pause_records(out)),
                  what="the probes attached again after the burst (an ebpf_resume record)")
    target.send("slow\n")
    slow = json.loads(target.wait_for_line("slow ", timeout=30)[5:])
    sidecar.send_signal(2)
    _, err = sidecar.communicate(timeout=30)
    assert sidecar.returncode == 0, err
    trace = read_trace(out)

    # THEN the end record counts the pauses, and the trace has their times
    ebpf = trace.end["ebpf"]
    assert ebpf is not None, f"eBPF was not used: {err}"
    assert ebpf["max_rate"] == 5000 and ebpf["pauses"] >= 1 and ebpf["paused_s"] > 0, ebpf
    pauses = trace.tables.ebpf_pauses
    assert len(pauses) == ebpf["pauses"], (pauses, ebpf)
    assert all(end is not None and start < end for start, end in pauses), pauses
    # AND the sampler saw the pauses in the program's own flag, mapped (it names every ISeq anew at
    # the tick that sees a pause start or end: test_sampler_pause_flag)
    assert trace.end["pauses_seen"] >= 1, (trace.end["pauses_seen"], pauses)
    # AND the burst's methods born while the probes were detached have no eBPF name: remote reads
    # named them, and their samples carry their names
    by_label = {}
    for r in trace.records:
        if r["t"] == "iseq":
            by_label.setdefault(r["label"], []).append(r)
    unprobed = [m for m in burst["ran"]
                if any(s + DETACH_MARGIN_NS <= m["born0"] and m["born1"] <= e - ATTACH_MARGIN_NS for s, e in pauses)]
    assert unprobed, f"no method run was born while the probes were detached: {pauses}, {burst['ran']}"
    counts = sampled_names(trace, [m["name"] for m in burst["ran"]])
    for m in unprobed:
        assert {r["source"] for r in by_label.get(m["name"], [])} == {"remote"}, (m, by_label.get(m["name"]))
        assert counts[m["name"]] > 0, f"{m['name']} ran 20 ms but no sample names it: {counts}"
    # AND the methods evaluated slowly after the pauses were named at birth by eBPF again
    counts = sampled_names(trace, [m["name"] for m in slow["ran"]])
    for m in slow["ran"]:
        recs = by_label.get(m["name"])
        assert recs and {r["source"] for r in recs} == {"ebpf"}, (m, recs)
        assert m["born0"] <= recs[0]["at_ns"] <= m["born1"]
        assert not any(s <= recs[0]["at_ns"] <= e for s, e in pauses)
    assert sum(counts.values()) > 0, counts



def test_taking_the_probes_out_never_stops_the_app_for_long(ruby_target, sidecar_process, tmp_path):
    # GIVEN a Ruby app recorded with eBPF at a budget of 200 ISeqs/s: every resume meets the burst
    # below and pauses again at once
    target = ruby_target("eval_burst.rb")
    out = tmp_path / "trace.msgpack"
    sidecar = sidecar_process("attach", "--pid", str(target.pid), "-o", str(out), "--duration", "600", "-q",
                              "--ebpf-max-rate", "200")
    # sampling starts at once; eBPF is compiled and attached beside it: these tests are about eBPF naming
    wait_for_ebpf(sidecar, out)
    # WHEN it creates ISeqs without pause until the probes were taken out three times (at once, and
    # after each backoff: 0.5 s, then 1 s; counted from the trace, not timed: under load the
    # probes take longer to come back)
    stop = tmp_path / "stop"
    target.send(f"burst_until {stop}\n")
    wait_for_ebpf(sidecar, lambda: sum(r["t"] == "ebpf_pause" for r in pause_records(out)) >= 3,
                  what="three pauses of the probes (ebpf_pause records)")
    stop.touch()
    burst = json.loads(target.wait_for_line("burst ", timeout=60)[6:])
    sidecar.send_signal(2)
    _, err = sidecar.communicate(timeout=30)
    assert sidecar.returncode == 0, err
    trace = read_trace(out)
    ebpf = trace.end["ebpf"]
    # THEN the probes were taken out at least 3 times while the app ran, each pause in the trace
    assert ebpf["pauses"] >= 3 and len(trace.tables.ebpf_pauses) == ebpf["pauses"], (ebpf, trace.tables.ebpf_pauses)
    # AND the app's thread never slept as long as a second in one turn of its loop (asleep: neither
    # on a CPU nor waiting for one, so a loaded machine's queues do not count). What a pause costs it
    # is a speed, measured in benchmarks/ebpf_pause_cost.py: at most ~1 ms a detach, quiet or beside
    # two `yes`; this test once saw 12.7 ms over 3 pauses under a heavy load (the kernel holds the
    # app's memory map to write a breakpoint out, and so do the sidecar's remote reads; a holder
    # preempted there keeps the app waiting). A second is far beyond that: a pause that stops the
    # app (a signal, a wait on the sidecar) fails here
    assert burst["longest_sleep_ns"] < 1_000_000_000, \
        f"the app slept {burst['longest_sleep_ns'] / 1e6:.0f} ms at once ({burst['slept_ns'] / 1e6:.0f} ms in all) " \
        f"during {ebpf['pauses']} pauses"
