"""ISeq addresses that change meaning while recorded: a freed ISeq's slot taken by a new method, and
ISeqs moved by GC.compact. Every sample must be named as what ran at its own time."""
from __future__ import annotations

import json
import time

import pytest

from conftest import read_trace
from ebpf_wait import wait_for_ebpf
from sdb_trace import KIND_RUBY, TraceError, iter_samples, load_tables

from test_ebpf_symbolizer import ebpf_missing

pytestmark = [pytest.mark.every_ruby, pytest.mark.skipif(bool(ebpf_missing()), reason=f"no eBPF here: {ebpf_missing()}")]


MAX_BATCHES = 8     # of 5 rounds; without YJIT an address is reused within the first one


def reused_addresses(path, rounds, prefix: str) -> dict:
    """{address: names} of the sampled methods (resolved at each sample's time) seen at an address
    under more than one name, in a trace still being written."""
    tables = load_tables(str(path))
    samples = []
    try:
        iter_samples(str(path), lambda base, dts, threads, stacks, states, wins:
                     samples.extend((base + dt, base + dt - w * 1000, sid) for dt, sid, w in zip(dts, stacks, wins)),
                     windows=True)
    except TraceError:
        pass    # the last record is still being written
    seen = {}
    for t_ns, lo_ns, sid in samples:
        if sid >= len(tables.stacks) or not any(r["t0"] <= lo_ns and t_ns <= r["t1"] for r in rounds):
            continue
        for fid in tables.stacks[sid]:
            if tables.frame_kind[fid] == KIND_RUBY:
                sym = tables.symbol_at(tables.iseqs, tables.frame_iseq[fid], t_ns, lo_ns)
                if sym is not None and sym.label.startswith(prefix):
                    seen.setdefault(tables.frame_iseq[fid], set()).add(sym.label)
                    break
    return {a: n for a, n in seen.items() if len(n) > 1}


def record_churn(ruby_target, sidecar_process, tmp_path, *args, until_reused: str = "", extra=(), pauses=False):
    """Runs iseq_churn.rb with the sidecar attached; returns (trace, rounds). until_reused: a method
    prefix; batches go on (up to MAX_BATCHES) until an address was sampled under two of those methods."""
    target = ruby_target("iseq_churn.rb", *args)
    out = tmp_path / "trace.msgpack"
    sidecar = sidecar_process("attach", "--pid", str(target.pid), "-o", str(out), "--duration", "600", "-q", *extra)
    # sampling starts at once; eBPF is compiled and attached beside it: these tests are about eBPF naming
    wait_for_ebpf(sidecar, out)
    target.send("go\n")
    rounds = []
    batches = 0
    while True:
        line = target.wait_for_line("", timeout=60)
        if line.startswith("round "):
            rounds.append(json.loads(line[6:]))
        elif line == "batch":
            batches += 1
            time.sleep(0.25)    # a drain (every 100 ms) wrote the batch's samples and symbols
            done = batches >= MAX_BATCHES or reused_addresses(out, rounds, until_reused)
            target.send("stop\n" if done else "more\n")
        elif line == "done":
            break
    sidecar.send_signal(2)
    _, err = sidecar.communicate(timeout=30)
    assert sidecar.returncode == 0, err
    trace = read_trace(out)
    assert trace.end["ebpf"] is not None, f"eBPF was not used: {err}"
    if pauses:
        assert trace.end["ebpf"]["pauses"] >= 1, trace.end["ebpf"]
    else:
        # ~100 ISeqs a second, far under the governor's default budget: every name here comes from eBPF
        assert trace.end["ebpf"]["pauses"] == 0, trace.end["ebpf"]
    return trace, rounds


def check_names(trace, rounds, prefix: str, unnamed: list = None, at_least: int = None) -> dict:
    """Every sample whose frames were copied inside a round (the whole window between the earliest
    moment of the copy and the sample's time: a sidecar preempted after the copy stamps a later time)
    names its method right (resolved over that window), and no Ruby frame of those samples is
    unnamed (with `unnamed`, a list: samples with an unnamed frame are put there, not failed); at
    least `at_least` samples (one a round unless told) are checked.
    Returns {iseq address: set of method names sampled there}."""
    t = trace.tables
    seen_at = {}
    checked = 0
    for (t_ns, _serial, sid, _state), win_us in zip(trace.samples, trace.windows):
        lo_ns = t_ns - win_us * 1000
        inside = [r for r in rounds if r["t0"] <= lo_ns and t_ns <= r["t1"]]
        if not inside:
            continue
        frames = [f for f in t.stacks[sid] if t.frame_kind[f] == KIND_RUBY]
        syms = [(t.frame_iseq[f], t.symbol_at(t.iseqs, t.frame_iseq[f], t_ns, lo_ns)) for f in frames]
        if unnamed is not None and any(s is None for _, s in syms):
            unnamed.append((t_ns, lo_ns))
            syms = [(a, s) for a, s in syms if s is not None]
        assert all(s is not None for _, s in syms), f"an unnamed frame at {t_ns}: {syms}"
        ours = [(addr, s.label) for addr, s in syms if s.label.startswith(prefix)]
        if not ours:
            continue        # the sample caught `run` before or after the call
        assert ours[0][1] == inside[0]["name"], f"sample at {t_ns} in {inside[0]['name']} named {ours[0][1]}"
        seen_at.setdefault(ours[0][0], set()).add(ours[0][1])
        checked += 1
    at_least = len(rounds) if at_least is None else at_least
    assert checked >= at_least, f"only {checked} samples inside {len(rounds)} rounds"
    return seen_at


def test_reused_iseq_address_gets_each_name_at_its_time(ruby_target, sidecar_process, tmp_path):
    # GIVEN methods evaluated, run, removed and collected in turn, so new ISeqs reuse freed addresses
    trace, rounds = record_churn(ruby_target, sidecar_process, tmp_path, "reuse", until_reused="sdb_churn_")
    # THEN every sample names the method that ran then
    seen_at = check_names(trace, rounds, "sdb_churn_")
    # AND the case happened: one address was sampled under two different methods
    reused = {hex(a): sorted(n) for a, n in seen_at.items() if len(n) > 1}
    if not reused and "+YJIT" in trace.header["ruby_description"]:
        # measured on 3.4.5 --yjit: 159 addresses for 160 removed and collected methods
        pytest.skip(f"this Ruby under YJIT reused no removed method's ISeq address in {len(rounds) // 8} rounds "
                    f"(every sample was still checked and named right)")
    assert reused, f"no ISeq address was reused by a sampled method in {len(rounds) // 8} rounds"


def test_gc_compact_during_recording_loses_no_names(ruby_target, sidecar_process, tmp_path):
    # GIVEN methods evaluated and run, then moved by a compaction that moves every movable object,
    # then run again
    trace, rounds = record_churn(ruby_target, sidecar_process, tmp_path, "compact")
    # THEN every sample before and after the compaction names its method, none is unnamed
    check_names(trace, rounds, "sdb_moved_")
    half = len(rounds) // 2
    before = addresses_of(check_names(trace, rounds[:half], "sdb_moved_", at_least=1))
    after = addresses_of(check_names(trace, rounds[half:], "sdb_moved_", at_least=0))
    # (under YJIT the methods' entries stay where they were while their ISeqs move: a sampler that
    # kept its first read of an entry's ISeq refused every sample after the compaction as torn)
    assert after, (f"no sample inside the {len(rounds) - half} rounds after the compaction "
                   f"({trace.end['torn']} samples torn)")
    # AND the case happened: methods were sampled at one address before and another after (what the
    # samples show, whatever eBPF saw)
    assert all(len(a) == 1 for a in list(before.values()) + list(after.values())), (before, after)
    moved = {n: (min(before[n]), min(after[n])) for n in before.keys() & after.keys() if before[n] != after[n]}
    assert moved, f"none of the {len(before)} methods sampled before and after the compaction moved"
    # AND where the Ruby build lets us probe the object mover, the move of every moved method carried
    # its name from its old address to its new one; every move record that names its ISeq has the
    # name its source address had (a move that carries no name, "(unknown)", is an unnamed ISeq
    # taking the place of a named one: its source may have no record)
    if trace.end["ebpf"]["mover"]:
        moves = [r for r in trace.records if r["t"] == "iseq" and r["source"] == "move"
                 and r["label"] != "(unknown)"]
        carried = {(m["moved_from"], m["addr"], m["label"]) for m in moves}
        missed = {n: (hex(a), hex(b)) for n, (a, b) in moved.items() if (a, b, n) not in carried}
        assert not missed, f"moves the mover did not report with their names: {missed}"
        by_addr = {}
        for r in trace.records:
            if r["t"] == "iseq":
                by_addr.setdefault(r["addr"], []).append(r)
        for m in moves:
            before_m = [r for r in by_addr.get(m["moved_from"], []) if r["at_ns"] <= m["at_ns"]]
            assert before_m and before_m[-1]["label"] == m["label"], (m, before_m)


def addresses_of(seen_at: dict) -> dict:
    """check_names' {address: names} turned round: {name: addresses}."""
    out = {}
    for addr, names in seen_at.items():
        for n in names:
            out.setdefault(n, set()).add(addr)
    return out


def test_reused_addresses_are_named_right_while_the_governor_pauses_the_probes(ruby_target, sidecar_process,
                                                                              tmp_path):
    # GIVEN the same churn, recorded with a budget of 20 ISeqs a second: the governor pauses the
    # creation probes over and over, so methods are born while eBPF sees nothing and their addresses
    # held names eBPF gave before
    trace, rounds = record_churn(ruby_target, sidecar_process, tmp_path, "reuse", until_reused="sdb_churn_",
                                 extra=("--ebpf-max-rate", "20"), pauses=True)
    # THEN every sample that names its method names the method that ran then; a name given before a
    # pause is not taken after its start (births went unseen): such frames are unnamed until the
    # sidecar, told of the pause, has named every ISeq anew (each such sample is after a pause start)
    unnamed = []
    seen_at = check_names(trace, rounds, "sdb_churn_", unnamed)
    starts = [p[0] for p in trace.tables.ebpf_pauses]
    assert starts, "the governor never paused the probes"
    assert all(any(s <= t_ns for s in starts) for t_ns, _ in unnamed), unnamed[:5]
    print(f"{len(unnamed)} samples inside rounds with an unnamed frame, {len(starts)} pauses")
    reused = {hex(a): sorted(n) for a, n in seen_at.items() if len(n) > 1}
    if not reused and "+YJIT" in trace.header["ruby_description"]:
        pytest.skip("this Ruby under YJIT reused no removed method's ISeq address (every sample was checked)")
    assert reused, f"no ISeq address was reused by a sampled method in {len(rounds) // 8} rounds"
