"""The eBPF symbolizer names ISeqs at birth: methods defined after attach are named from eBPF events
(source "ebpf", the event's time), with probes found in the target's own Ruby through its maps."""
from __future__ import annotations

import json

import pytest

from conftest import ebpf_missing, read_trace, samples_so_far, wait_for
from ebpf_wait import wait_for_ebpf


pytestmark = [pytest.mark.every_ruby, pytest.mark.skipif(bool(ebpf_missing()), reason=f"no eBPF here: {ebpf_missing()}")]


def mapped_files(pid: int) -> set:
    with open(f"/proc/{pid}/maps") as f:
        return {line.split(None, 5)[5].strip() for line in f if len(line.split(None, 5)) == 6}


def sampled_labels(trace) -> set:
    """Labels of the Ruby frames of every sample, each resolved at the sample's own time."""
    from sdb_trace import KIND_RUBY
    t = trace.tables
    out = set()
    for t_ns, _serial, sid, _state in trace.samples:
        for fid in t.stacks[sid]:
            if t.frame_kind[fid] == KIND_RUBY:
                sym = t.symbol_at(t.iseqs, t.frame_iseq[fid], t_ns)
                if sym is not None:
                    out.add(sym.label)
    return out


def start_recording(ruby_target, sidecar_process, tmp_path, program, *args, extra=()):
    target = ruby_target(program, *args)
    out = tmp_path / "trace.msgpack"
    sidecar = sidecar_process("attach", "--pid", str(target.pid), "-o", str(out), "--duration", "600", "-q",
                              *extra)
    if "--no-ebpf" in extra:
        wait_for(lambda: samples_so_far(out) > 0 or sidecar.poll() is not None, 60, what="first samples")
    else:
        # sampling starts at once; eBPF is compiled and attached beside it: these tests are about eBPF naming
        wait_for_ebpf(sidecar, out)
    assert sidecar.poll() is None, sidecar.communicate()[1]
    return target, sidecar, out


def sample_on_then_stop(sidecar, out):
    """After "ran" the program runs sdb_loaded_method until killed: wait until the trace holds another
    1,000 samples (a second of them; what was drained before "ran" is in the count already), then
    stop. A 0.3 s run of it could go unsampled when a loaded machine starved the sampler."""
    n0 = samples_so_far(out)
    wait_for(lambda: samples_so_far(out) >= n0 + 1000 or sidecar.poll() is not None, 120,
             what="a second of samples after the methods ran")
    return stop(sidecar)


def stop(sidecar):
    sidecar.send_signal(2)
    _, err = sidecar.communicate(timeout=30)
    assert sidecar.returncode == 0, err
    return err


def test_methods_evaluated_after_attach_are_named_by_ebpf(ruby_target, sidecar_process, tmp_path):
    # GIVEN a Ruby app recorded with eBPF
    target, sidecar, out = start_recording(ruby_target, sidecar_process, tmp_path, "eval_after_attach.rb")
    maps = mapped_files(target.pid)
    # WHEN it defines methods by eval (long names, a long path) and loads a file through a symlink,
    # then runs them
    target.send(f"go {tmp_path}\n")
    ran = json.loads(target.wait_for_line("ran ", timeout=30)[4:])
    err = sample_on_then_stop(sidecar, out)
    trace = read_trace(out)

    # THEN the probes were found in the target's own Ruby, through its maps
    ebpf = trace.end["ebpf"]
    assert ebpf is not None, f"eBPF was not used: {err}"
    assert ebpf["object"] in maps
    assert ebpf["probes"] and set(ebpf["events"]) <= set(ebpf["probes"])
    assert ebpf["lost"] == 0
    assert ebpf["pauses"] == 0, "the governor paused the probes: this test creates far fewer ISeqs than its budget"
    # AND every evaluated method was named from an eBPF event, with its full label and path
    iseqs = [r for r in trace.records if r["t"] == "iseq"]
    by_label = {}
    for r in iseqs:
        by_label.setdefault(r["label"], []).append(r)
    for i, name in enumerate(ran["names"]):
        recs = by_label.get(name)
        assert recs, f"no symbol for {name}"
        assert {r["source"] for r in recs} == {"ebpf"}, recs   # the sampler read none of them remotely
        assert recs[0]["path"] == ran["eval_path"] and recs[0]["realpath"] is None
        assert recs[0]["base_label"] == name and recs[0]["type"] == 1   # a method
        assert recs[0]["first_line"] == ran["eval_first_line"] + 10 * i
        assert trace.header["start_mono_ns"] < recs[0]["at_ns"] < trace.end["at_ns"]
    # AND the file loaded through a symlink keeps path and realpath apart, as Ruby does
    loaded = by_label["sdb_loaded_method"]
    assert loaded[0]["source"] == "ebpf"
    assert (loaded[0]["path"], loaded[0]["realpath"]) == (ran["loaded"]["path"], ran["loaded"]["absolute_path"])
    assert loaded[0]["path"] != loaded[0]["realpath"] and len(loaded[0]["path"]) > 127
    assert loaded[0]["first_line"] == ran["loaded"]["first_line"]
    # AND the samples taken in those methods resolve to their names
    sampled = sampled_labels(trace)
    assert "sdb_loaded_method" in sampled
    assert any(n in sampled for n in ran["names"]), sorted(sampled)


def test_no_ebpf_option_names_everything_remotely(ruby_target, sidecar_process, tmp_path):
    # GIVEN a recording with --no-ebpf
    target, sidecar, out = start_recording(ruby_target, sidecar_process, tmp_path, "eval_after_attach.rb",
                                           extra=("--no-ebpf",))
    # WHEN methods are defined and run after attach
    target.send(f"go {tmp_path}\n")
    ran = json.loads(target.wait_for_line("ran ", timeout=30)[4:])
    sample_on_then_stop(sidecar, out)
    trace = read_trace(out)
    # THEN no probe was used, and the sampled methods are still named, by remote reads
    assert trace.end["ebpf"] is None
    sources = {r["source"] for r in trace.records if r["t"] == "iseq"}
    assert sources == {"remote"}
    sampled = sampled_labels(trace)
    assert "sdb_loaded_method" in sampled
    assert any(n in sampled for n in ran["names"])
