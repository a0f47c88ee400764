"""What a new user meets first: a short program recorded with eBPF on is sampled from its first
milliseconds (sampling does not wait for eBPF to compile), every frame of it named; two sidecars on
two processes of the same Ruby each get eBPF naming; the end record counts what stayed unnamed."""
from __future__ import annotations

import json
import os
import subprocess

import pytest

from conftest import PROGRAMS, SIDECAR, SYMBOLIZE, read_trace, ruby_cmd, ruby_env, wait_for
from sdb_trace import KIND_RUBY
from ebpf_wait import SidecarProcess, wait_for_ebpf
from sdb_symbolize.reporters.json_lines import read_samples

from test_ebpf_symbolizer import ebpf_missing

pytestmark = pytest.mark.every_ruby

UNNAMED = ("(C function)", "(unknown")


def record(tmp_path, *program_args: str, extra=()):
    out = tmp_path / "trace.msgpack"
    p = subprocess.run([*SIDECAR, "record", "-q", "-o", str(out), *extra, "--",
                        *ruby_cmd(PROGRAMS / "short_work.rb", *program_args)],
                       capture_output=True, text=True, timeout=300, cwd=str(tmp_path), env=ruby_env())
    assert p.returncode == 0, p.stderr
    start = int(next(line for line in p.stdout.splitlines() if line.startswith("start "))[6:])
    end = int(next(line for line in p.stdout.splitlines() if line.startswith("end "))[4:])
    return read_trace(out), start, end, p.stderr


def unnamed_samples(trace_path, start_ns: int = 0, end_ns: int = 1 << 63) -> list:
    """The samples (blocked ones included) taken from start_ns to end_ns that hold a frame without a
    name, as sdb-symbolize's json output gives them."""
    r = subprocess.run([*SYMBOLIZE, str(trace_path), "--idle", "--format", "json"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    out = []
    for s in read_samples(r.stdout.splitlines()):
        if start_ns <= s["t_ns"] <= end_ns and any(u in f[0] for f in s["frames"] for u in UNNAMED):
            out.append(s)
    return out


def refused_for_a_sweep(trace) -> set:
    """The ISeqs the sidecar left unnamed because a GC sweep could have freed their names' Strings
    between the sample and every read (without eBPF a name is read from the target; a program that
    allocates slowly on 3.1 sweeps lazily nearly all the time): each `(unknown)` record of theirs
    says `refused: "sweep"` (a later sighting may name them: from then on). A wrong name is worse
    than none: those stay unnamed, counted, by design."""
    unknown: dict = {}
    for r in trace.records:
        if r["t"] == "iseq" and r.get("label") == "(unknown)":
            unknown.setdefault(r["addr"], []).append(r)
    return {a for a, rs in unknown.items() if all(r.get("refused") == "sweep" for r in rs)}


def unnamed_only_for_a_sweep(trace, sample, refused: set) -> bool:
    """Every unnamed frame of `sample` (as sdb-symbolize's json gives it) is an ISeq of `refused`."""
    if not refused or any(f[0].startswith("(C function)") for f in sample["frames"]):
        return False
    unknown = sum(f[0].startswith("(unknown") for f in sample["frames"])
    t = trace.tables
    return any(sum(t.frame_iseq[f] in refused for f in t.stacks[sid] if t.frame_kind[f] == KIND_RUBY) == unknown
               for t_ns, _serial, sid, _state in trace.samples if t_ns == sample["t_ns"])


def unnamed_story(trace) -> str:
    """What a failure needs to say why a frame went unnamed, whole (a string: pytest shortens a
    dict's repr): when eBPF and the in-context reads came (seconds from the trace's start), every
    name record of each address written (unknown) once (source, time), the end record's counts."""
    h = trace.header["start_mono_ns"]
    rel = lambda ns: round((ns - h) / 1e9, 4)       # noqa: E731
    unknown = {r["addr"] for r in trace.records if r["t"] == "iseq" and r.get("label") == "(unknown)"}
    return json.dumps({
        "ebpf_attached": [rel(r["at_ns"]) for r in trace.records if r["t"] == "ebpf_attached"],
        "pauses": [(r["t"], rel(r["at_ns"])) for r in trace.records if r["t"] in ("ebpf_pause", "ebpf_resume")],
        "in_context_since": rel(trace.end.get("in_context_since_ns") or h),
        "unknown_iseqs": {hex(a): [(r.get("label"), r.get("source"), rel(r["at_ns"])) for r in trace.records
                                   if r["t"] == "iseq" and r["addr"] == a] for a in sorted(unknown)},
        "unnamed_methods": [(hex(r["me"]), r.get("source"), rel(r.get("at_ns", h))) for r in trace.records
                            if r["t"] == "method" and not r.get("name")],
        "end": {k: trace.end.get(k) for k in ("unnamed", "renamed", "symbol_errors", "names_superseded",
                                               "names_unproven", "names_read_in_sweep", "torn", "in_context",
                                               "samples", "late", "missed", "reason")},
        "end_s": rel(trace.end["at_ns"])})


@pytest.mark.skipif(bool(ebpf_missing()), reason=f"no eBPF here: {ebpf_missing()}")
def test_record_samples_a_one_second_program_from_its_start_every_frame_named(tmp_path):
    # GIVEN a program that works one second, recorded with eBPF on (bcc's compile alone takes ~1 s)
    trace, start, end, err = record(tmp_path, "each", "1")
    # THEN sampling began before eBPF was attached: it did not wait for the compile
    attached = [r["at_ns"] for r in trace.records if r["t"] == "ebpf_attached"]
    main = trace.serial_named("main") if "main" in sum(trace.thread_names.values(), []) else None
    ours = [s for s in trace.samples if start <= s[0] <= end and (main is None or s[1] == main)]
    assert ours, f"no sample while the program ran: {err}"
    if attached:
        assert min(s[0] for s in ours) < attached[0], "the first sample waited for eBPF"
    # AND at least 90% of the ticks the sidecar made while it ran have a sample of it (ticks, not the
    # asked rate: on a busy machine late ticks are skipped, and counted, by design), from the moment
    # the trace began (the header's time): how soon that is after the program's first line is a
    # speed, measured in benchmarks/ (first_sample), not a timing this test could rely on under load
    elapsed = (trace.end["at_ns"] - trace.header["start_mono_ns"]) / 1e9
    ticks_per_s = trace.end["ticks"] / elapsed
    expected = (end - max(start, trace.header["start_mono_ns"])) / 1e9 * ticks_per_s
    assert len(ours) >= 0.9 * expected, (len(ours), expected, trace.end)
    # AND every frame of every sample taken while it ran is named (what it calls after its last line,
    # on its way out, may be gone before it can be read: the end record counts it), but a frame the
    # sidecar refused to name because a GC sweep could have freed its name (refused_for_a_sweep)
    refused = refused_for_a_sweep(trace)
    unnamed = [s for s in unnamed_samples(trace.path, start, end) if not unnamed_only_for_a_sweep(trace, s, refused)]
    assert not unnamed, f"{len(unnamed)} samples unnamed, the first: {unnamed[0]}; {unnamed_story(trace)}"
    assert set(trace.end["unnamed"]) == {"iseqs", "methods"}
    assert trace.end["names_read_in_sweep"] >= len(refused), trace.end


@pytest.mark.parametrize("kind", ["each", "sleep"])
@pytest.mark.parametrize("seconds", ["1", "2"])
def test_short_recordings_name_every_frame(tmp_path, ruby_target, sidecar_process, kind, seconds):
    # GIVEN a method calling (2..n).each { ... }, or loop { sleep }, recorded by `record` for its whole
    # run and by `attach` for that long
    trace, start, end, _ = record(tmp_path, kind, seconds)
    target = ruby_target("short_work.rb", kind, "wait")
    attached = tmp_path / "attached.msgpack"
    sidecar = sidecar_process("attach", "--pid", str(target.pid), "-q", "-d", seconds, "-o", str(attached))
    _, err = sidecar.communicate(timeout=120)
    assert sidecar.returncode == 0, err
    # THEN no frame of either is a "(C function)" or an "(unknown ISeq ...)" (for `record`: while the
    # program ran, up to its last line), and the end records count what stayed unnamed: nothing, for
    # the program attached to (`record`'s may count what the program's exit took away)
    # but a frame the sidecar refused to name because a GC sweep could have freed its name (each of
    # its ISeq's records says so, and the end record counts each)
    for path, window in ((trace.path, (start, end)), (attached, (0, 1 << 63))):
        t = read_trace(path)
        assert t.end["samples"] > 0
        refused = refused_for_a_sweep(t)
        unnamed = [s for s in unnamed_samples(path, *window) if not unnamed_only_for_a_sweep(t, s, refused)]
        assert not unnamed, f"{len(unnamed)} samples unnamed in {path}, the first: {unnamed[0]}; {unnamed_story(t)}"
        if path == attached:
            swept = sum(1 for r in t.records if r["t"] == "iseq" and r.get("refused") == "sweep")
            assert t.end["unnamed"] == {"iseqs": swept, "methods": 0}, t.end
            assert t.end["names_read_in_sweep"] >= swept, t.end
        labels = {lbl for row in t.stack_labels for lbl in row if lbl}
        assert ("each_work" in labels) if kind == "each" else ("work" in labels)


@pytest.mark.skipif(bool(ebpf_missing()), reason=f"no eBPF here: {ebpf_missing()}")
def test_two_sidecars_on_two_processes_of_one_ruby_both_name_with_ebpf(tmp_path, ruby_target, sidecar_process):
    # GIVEN two processes of the same Ruby, each recorded by its own sidecar at the same time
    targets = [ruby_target("eval_after_attach.rb") for _ in range(2)]
    outs = [tmp_path / f"t{i}.msgpack" for i in range(2)]
    sidecars = [sidecar_process("attach", "--pid", str(t.pid), "-o", str(o), "--duration", "600", "-q")
                for t, o in zip(targets, outs)]
    # WHEN both have their eBPF symbolizer attached, and each process then defines and runs methods
    for o, s in zip(outs, sidecars):
        wait_for_ebpf(s, o)
    for i, t in enumerate(targets):
        (tmp_path / f"p{i}").mkdir()
        t.send(f"go {tmp_path / f'p{i}'}\n")
    for t in targets:
        t.wait_for_line("ran ", timeout=60)
    for s in sidecars:
        s.send_signal(2)
    # THEN each trace names those methods from eBPF records
    for o, s in zip(outs, sidecars):
        _, err = s.communicate(timeout=60)
        assert s.returncode == 0, err
        assert "notice" not in err, err
        trace = read_trace(o)
        assert trace.end["ebpf"] is not None
        ebpf_named = {r["label"] for r in trace.records if r["t"] == "iseq" and r["source"] == "ebpf"}
        assert "sdb_loaded_method" in ebpf_named, sorted(ebpf_named)[:20]


@pytest.mark.skipif(bool(ebpf_missing()), reason=f"no eBPF here: {ebpf_missing()}")
def test_record_of_a_program_shorter_than_the_ebpf_compile_exits_cleanly(tmp_path):
    # GIVEN a program that is over long before bcc could have compiled the eBPF program (a second)
    out = tmp_path / "trace.msgpack"
    p = subprocess.run([*SIDECAR, "record", "-q", "-o", str(out), "--",
                        *ruby_cmd(PROGRAMS / "short_work.rb", "sleep", "0.05")],
                       capture_output=True, text=True, timeout=300, cwd=str(tmp_path), env=ruby_env())
    # THEN record exits with the program's status, says nothing, and the trace is whole
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""
    trace = read_trace(out)
    # (whether the sampler's first tick came before so short a program ended depends on the machine's
    # load: once, under a heavy one, it did not; samples from the start: the one-second test above)
    assert trace.end is not None and trace.end["reason"] == "target-exited", trace.end
    assert trace.end["samples"] == len(trace.samples)


def uprobe_link_ids(pid) -> set:
    """The ids of the uprobe_multi BPF links process `pid` holds (its fds' fdinfo), or, pid None,
    that any process holds."""
    procs = [str(pid)] if pid is not None else [d for d in os.listdir("/proc") if d.isdigit()]
    ids = set()
    for proc in procs:
        try:
            fds = os.listdir(f"/proc/{proc}/fdinfo")
        except OSError:
            continue                    # gone
        for fd in fds:
            try:
                with open(f"/proc/{proc}/fdinfo/{fd}") as f:
                    info = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
            except OSError:
                continue
            if info.get("link_type", "").strip() in ("uprobe_multi", "uretprobe_multi"):
                ids.add(int(info["link_id"]))
    return ids


@pytest.mark.skipif(bool(ebpf_missing()), reason=f"no eBPF here: {ebpf_missing()}")
def test_record_leaves_no_probe_behind(tmp_path):
    # GIVEN a program under `record` whose creation probes are in (uprobe_multi links the sidecar holds)
    out = tmp_path / "trace.msgpack"
    s = SidecarProcess([*SIDECAR, "record", "-q", "-o", str(out), "--",
                        *ruby_cmd(PROGRAMS / "short_work.rb", "sleep", "wait")], tmp_path / "record.stderr",
                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=str(tmp_path), env=ruby_env())
    try:
        wait_for_ebpf(s, out)
        links = uprobe_link_ids(s.pid)
        assert links, "the symbolizer is attached, but record holds no uprobe_multi link"
        # WHEN the program exits (communicate closes its stdin) and record with it
        _, err = s.communicate(timeout=120)
        assert s.returncode == 0, err
    finally:
        if s.poll() is None:
            s.kill()
            s.wait()
    # THEN no process holds those links any more: the probes are out of the kernel (record leaves the
    # last close, and its wait for the kernel's grace periods, to a short-lived process of its own)
    wait_for(lambda: not (uprobe_link_ids(None) & links), 60, interval=0.2, what="the links to be closed")
