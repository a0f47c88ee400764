"""A process tree recorded as one trace: `attach --pid PARENT` and `record -- CMD` follow the children
the parent forks after the recording started (as puma's master forks its workers, and re-forks one that
died), each as a process of its own in the trace: its pid, parent and title, its samples from its first
moments, its own names (a method born in one child is never another child's, though they share
addresses), and one eBPF program naming what each child creates. tests/programs/forking_tree.rb."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Dict

import pytest

from conftest import (PROGRAMS, REPO, SIDECAR, SYMBOLIZE, RubyTarget, ebpf_all_in_so_far, process_root, ruby_cmd,
                      ruby_env, samples_so_far, wait_for)
from ebpf_wait import ANY_MISSING, EVERY_PROGRAM, wait_for_ebpf
from sdb_trace import KIND_RUBY, SPAN_BEGIN, SPAN_END, TraceError, TraceReader, load_tables

SPAN_REQUEST = 1         # a span's kind: a request (docs/trace-format.md)
from test_ebpf_symbolizer import ebpf_missing

pytestmark = pytest.mark.every_ruby

RATE = 1000
CHILD_SAMPLES = 3000        # each child is recorded at least this long (3 s at 1 kHz) before the checks
SHARE = 0.9                 # of the samples its life asked for, at least


def processes_so_far(path) -> Dict[int, dict]:
    """pid -> {"samples", "ebpf" (an ebpf_attached record in its section), "title", "requests" (requests
    that ended, by their spans)} of a trace that may still be written."""
    out: Dict[int, dict] = {}
    by_proc: Dict[int, dict] = {}
    begun = set()
    cur = 0
    try:
        with TraceReader(str(path)) as r:
            try:
                for rec in r.records():
                    t = rec["t"]
                    if t == "in":
                        cur = rec["proc"]
                    elif t == "process":
                        p = by_proc.setdefault(rec["proc"], {"samples": 0, "ebpf": False, "requests": 0})
                        p["title"] = " ".join(rec["command"])
                        out[rec["pid"]] = p
                    elif t == "samples":
                        by_proc.setdefault(cur, {"samples": 0, "ebpf": False, "requests": 0})["samples"] += len(rec["stack"])
                    elif t == "spans":     # a request: begun with its kind, ended (an end's kind is 0)
                        p = by_proc.setdefault(cur, {"samples": 0, "ebpf": False, "requests": 0})
                        for w, sp, k in zip(rec["what"], rec["span"], rec["kind"]):
                            if w == SPAN_BEGIN and k == SPAN_REQUEST:
                                begun.add((cur, sp))
                            elif w == SPAN_END and (cur, sp) in begun:
                                p["requests"] += 1
                    elif t == "ebpf_attached":
                        by_proc.setdefault(cur, {"samples": 0, "ebpf": False, "requests": 0})["ebpf"] = True
            except TraceError:
                pass
    except (TraceError, OSError):
        pass
    return out


class Tree:
    """forking_tree.rb driven through its stdin; its stdout read line by line."""

    def __init__(self, target: RubyTarget):
        self.t = target
        self.children: Dict[str, dict] = {}

    def fork(self, name: str) -> dict:
        self.t.send(f"fork {name}\n")
        _, _, pid, t0 = self.t.wait_for_line(f"child {name} ").split()
        self.children[name] = {"pid": int(pid), "t0": int(t0)}
        return self.children[name]

    def go(self, name: str) -> None:
        self.t.send(f"go {name}\n")
        self.t.wait_for_line(f"working {name}")

    def kill(self, name: str) -> None:
        # the child runs at least until the command is sent (CLOCK_MONOTONIC, as the child's T0): its
        # samples are asked for until then, not until the parent's "killed NAME T", which comes after
        # the reap and a loaded machine can delay (on a loaded machine the parent was sampled in Process.wait for
        # 1.07 s after the child's last sample and its end in the trace, 4 ms apart)
        sent = time.monotonic_ns()
        self.t.send(f"kill {name}\n")
        self.t.wait_for_line(f"killed {name} ")
        self.children[name]["end"] = sent


def wait_recorded(out, pid: int, samples: int = 1, ebpf=None) -> None:
    """Until the trace holds `samples` samples of process pid, and with `ebpf` (the sidecar) its
    ebpf_attached record: that waits for the compile (ebpf_wait.wait_for_ebpf)."""
    def done():
        p = processes_so_far(out).get(pid, {})
        return p.get("samples", 0) >= samples and (not ebpf or p["ebpf"])
    # each look reads the whole trace so far: twice a second is plenty
    what = f"process {pid} recorded ({samples} samples{', eBPF attached' if ebpf else ''})"
    if ebpf:
        wait_for_ebpf(ebpf, done, what=what, interval=0.5)
    else:
        wait_for(done, 180, interval=0.5, what=what)


def labels_by_pid(path) -> Dict[int, set]:
    """pid -> every Ruby frame label of its samples' stacks (its own names)."""
    tables = load_tables(str(path))
    assert tables.error is None, tables.error
    out = {}
    for pt in tables.procs.values():
        labels = set()
        for stack in pt.stacks:
            for fid in stack:
                if pt.frame_kind[fid] == KIND_RUBY:
                    for sym in pt.iseqs.get(pt.frame_iseq[fid], ()):
                        labels.add(sym.label)
        out[pt.pid] = labels
    return out


def test_attach_follows_children_forked_after_it_each_a_process_with_its_own_samples_and_names(
        ruby_target, sidecar_process, tmp_path):
    # GIVEN a parent recorded with attach (children followed by default)
    tree = Tree(ruby_target("forking_tree.rb"))
    parent = tree.t.pid
    out = tmp_path / "tree.msgpack"
    sidecar = sidecar_process("attach", "--pid", str(parent), "-o", str(out), "-r", str(RATE), "-d", "600", "-q")
    wait_for(lambda: samples_so_far(out) > 0 or sidecar.poll() is not None, 120, what="the first samples")
    assert sidecar.poll() is None, sidecar.communicate()[1]
    # WHEN it forks two children that each define and run a method of their own, one of them is
    # killed, and a third is forked in its place (a worker re-forked)
    for name in ("a", "b"):
        tree.fork(name)
        tree.go(name)
    for name in ("a", "b"):
        wait_recorded(out, tree.children[name]["pid"], CHILD_SAMPLES)
    tree.kill("a")
    tree.fork("c")
    tree.go("c")
    wait_recorded(out, tree.children["c"]["pid"], CHILD_SAMPLES)
    sidecar.send_signal(2)
    _, err = sidecar.communicate(timeout=120)
    assert sidecar.returncode == 0, err
    # THEN the trace holds the parent and the three children, each with its pid, parent and title
    t = load_tables(str(out))
    assert t.error is None and t.end is not None, t.error
    procs = {pt.pid: pt for pt in t.procs.values()}
    kids = {name: c["pid"] for name, c in tree.children.items()}
    assert set(procs) == {parent, *kids.values()}, (sorted(procs), kids)
    assert procs[parent].proc == 0 and t.end["processes"] == 4
    for name, pid in kids.items():
        assert procs[pid].process["parent"] == 0 and procs[pid].process["ppid"] == parent
        assert procs[pid].command == [f"tree child {name}"], procs[pid].command
    # AND the killed child ended as the process it was; the others ran to the recording's end
    assert procs[kids["a"]].process_end["reason"] == "target-exited", procs[kids["a"]].process_end
    assert procs[kids["b"]].process_end["reason"] == "stopped"
    # AND each child has its samples from its first moments (its registry was there when it printed T0)
    for name, c in tree.children.items():
        pt = procs[c["pid"]]
        end = c.get("end") or pt.process_end["at_ns"]
        asked = (end - c["t0"]) / 1e9 * RATE
        assert pt.process_samples >= SHARE * asked, (name, pt.process_samples, asked)
    # AND each child's method is named in its own process only, never in another's
    labels = labels_by_pid(out)
    for name, pid in kids.items():
        assert f"work_in_{name}" in labels[pid], (name, sorted(labels[pid]))
        others = {f"work_in_{n}" for n in kids if n != name}
        assert not others & labels[pid], (name, others & labels[pid])
    assert not any(lb.startswith("work_in_") for lb in labels[parent]), sorted(labels[parent])
    # AND the outputs put each process above its threads (--idle: the parent is blocked in `gets`
    # but for a few forks, which a sample on a busy machine may miss)
    r = subprocess.run([*SYMBOLIZE, str(out), "--no-lines", "--idle"], capture_output=True, text=True, timeout=300,
                       cwd=REPO)
    assert r.returncode == 0, r.stderr
    roots = {line.split(";", 1)[0] for line in r.stdout.splitlines()}
    assert roots == {process_root(parent, procs[parent].command),
                     *(f"process {pid} (tree child {name})" for name, pid in kids.items())}, roots


@pytest.mark.skipif(bool(ebpf_missing()), reason=f"no eBPF here: {ebpf_missing()}")
def test_one_ebpf_program_names_what_each_child_creates(ruby_target, sidecar_process, tmp_path):
    # GIVEN a parent recorded with attach, its eBPF program attached
    tree = Tree(ruby_target("forking_tree.rb"))
    out = tmp_path / "tree.msgpack"
    sidecar = sidecar_process("attach", "--pid", str(tree.t.pid), "-o", str(out), "-d", "600", "-q")
    wait_recorded(out, tree.t.pid, 1, ebpf=sidecar)
    # WHEN two children are forked, each attached, then each defines its method (its ISeq born there)
    for name in ("a", "b"):
        c = tree.fork(name)
        wait_recorded(out, c["pid"], 1, ebpf=sidecar)
        tree.go(name)
        wait_recorded(out, c["pid"], 500)
    sidecar.send_signal(2)
    _, err = sidecar.communicate(timeout=120)
    assert sidecar.returncode == 0, err
    # THEN each child's method was named by eBPF at its birth, in that child's process
    t = load_tables(str(out))
    assert t.error is None, t.error
    for name in ("a", "b"):
        pt = next(p for p in t.procs.values() if p.pid == tree.children[name]["pid"])
        named = [s for syms in pt.iseqs.values() for s in syms if s.label == f"work_in_{name}"]
        assert named and all(s.source == "ebpf" for s in named), [(s.label, s.source) for s in named]
    # AND one program served them all: the end record's eBPF summary counts every child's ISeqs
    assert t.end["ebpf"] is not None and sum(t.end["ebpf"]["events"].values()) >= 2, t.end["ebpf"]


def test_no_children_records_the_process_alone(ruby_target, sidecar_process, tmp_path):
    tree = Tree(ruby_target("forking_tree.rb"))
    out = tmp_path / "alone.msgpack"
    sidecar = sidecar_process("attach", "--pid", str(tree.t.pid), "-o", str(out), "-d", "600", "-q",
                              "--no-children")
    wait_for(lambda: samples_so_far(out) > 0 or sidecar.poll() is not None, 120, what="the first samples")
    tree.fork("a")
    tree.go("a")
    before = samples_so_far(out)
    wait_for(lambda: samples_so_far(out) >= before + 1000, 120, what="1,000 more samples")
    sidecar.send_signal(2)
    _, err = sidecar.communicate(timeout=120)
    assert sidecar.returncode == 0, err
    t = load_tables(str(out))
    assert list(t.procs) == [0] and t.pid == tree.t.pid
    assert not any(s.label.startswith("work_in_") for syms in t.iseqs.values() for s in syms)


def test_record_follows_the_programs_children_and_ends_with_it(tmp_path):
    # GIVEN `record -- ruby forking_tree.rb`, the program's stdin being the sidecar's
    out = tmp_path / "record.msgpack"
    p = subprocess.Popen([*SIDECAR, "record", "-o", str(out), "-r", str(RATE), "--",
                          *ruby_cmd(PROGRAMS / "forking_tree.rb")],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         cwd=str(tmp_path), env={**ruby_env(), "PYTHONPATH": ":".join(sys.path)})
    target = RubyTarget(p, "record forking_tree.rb", tmp_path / "none")
    try:
        target.wait_for_line("ready")
        tree = Tree(target)
        # WHEN the program forks a child that works, then quits
        c = tree.fork("a")
        tree.go("a")
        wait_recorded(out, c["pid"], CHILD_SAMPLES)
        target.send("quit\n")
        target.wait_for_line("done")
        assert p.wait(timeout=120) == 0, p.stderr.read()
    finally:
        target.kill()
    # THEN the trace has both processes, the child's samples from its first moments to its end
    t = load_tables(str(out))
    assert t.error is None and t.end is not None and t.end["reason"] == "target-exited", (t.error, t.end)
    kid = next(pt for pt in t.procs.values() if pt.pid == c["pid"])
    assert kid.process["parent"] == 0 and kid.command == ["tree child a"]
    asked = (kid.process_end["at_ns"] - c["t0"]) / 1e9 * RATE
    assert kid.process_samples >= SHARE * asked, (kid.process_samples, asked)


def test_a_long_recording_lets_the_processes_that_ended_go(ruby_target, sidecar_process, tmp_path):
    # GIVEN a parent recorded with attach, and its file descriptors once it records the parent alone
    tree = Tree(ruby_target("forking_tree.rb"))
    out = tmp_path / "many.msgpack"
    sidecar = sidecar_process("attach", "--pid", str(tree.t.pid), "-o", str(out), "-d", "600", "-q")
    wait_recorded(out, tree.t.pid, 1, ebpf=sidecar if not ebpf_missing() else None)
    # (every eBPF program in first: on 3.1 the kernel view comes after the symbolizer, and its maps
    # are descriptors of the sidecar's that stay)
    if not ebpf_missing():
        wait_for_ebpf(sidecar, lambda: ebpf_all_in_so_far(out), what=EVERY_PROGRAM, missing=ANY_MISSING,
                      interval=0.5)

    def fds() -> int:
        return len(os.listdir(f"/proc/{sidecar.pid}/fd"))
    before = fds()
    # WHEN 30 children come one after the other, each recorded, then killed
    for k in range(30):
        c = tree.fork(f"c{k}")
        tree.go(f"c{k}")
        wait_recorded(out, c["pid"], 50)
        tree.kill(f"c{k}")
    wait_for(lambda: fds() <= before + 4, 60, interval=0.5, what="the sidecar's descriptors back to before")
    after = fds()
    sidecar.send_signal(2)
    _, err = sidecar.communicate(timeout=120)
    assert sidecar.returncode == 0, err
    # THEN each was a process of the trace, and the sidecar holds no descriptor for any of them
    t = load_tables(str(out))
    assert t.end["processes"] == 31 and len(t.procs) == 31, t.end
    assert after <= before + 4, (before, after)


def test_a_child_whose_registry_goes_as_it_is_opened_is_a_process_without_the_gem(ruby_target, monkeypatch):
    # GIVEN a child running the gem, and its registry removed between the look-up and the open (the
    # child ending: the soak's children in a busy CI run; the sidecar died of FileNotFoundError)
    from sdb_sidecar.target import target as target_module
    from sdb_sidecar.errors import Exit, SdbError
    tree = Tree(ruby_target("forking_tree.rb"))
    child = tree.fork("a")["pid"]

    class Gone:
        def __init__(self, path):
            raise FileNotFoundError(2, "cannot open registry", path)
    monkeypatch.setattr(target_module._registry, "Registry", Gone)
    # WHEN it is opened
    with pytest.raises(SdbError) as e:
        target_module.open_target(child, wait_s=0)
    # THEN it is a Ruby process without (an enabled) gem, which a tree's recording looks at again
    # and passes over, never an error that ends the recording
    assert e.value.code == Exit.NO_GEM, e.value


def test_a_child_that_cannot_be_opened_is_left_out_and_the_recording_goes_on(ruby_target, monkeypatch, tmp_path):
    # GIVEN a parent with a child running the gem, and any unforeseen error opening the child
    from sdb_sidecar.recording import assembly, recorder
    from sdb_sidecar.recording.options import Options
    from sdb_sidecar.target.target import open_target
    tree = Tree(ruby_target("forking_tree.rb"))
    parent = tree.t.pid
    child = tree.fork("a")["pid"]
    root = open_target(parent, wait_s=5)

    def failing(pid, wait_s=0):
        if pid == child:
            raise OSError(5, "Input/output error")
        return open_target(pid, wait_s)
    monkeypatch.setattr(assembly, "open_target", failing)
    # WHEN the tree is recorded for 3 s
    out = tmp_path / "t.msgpack"
    counts = recorder.record(root, str(out), Options(duration_s=3, quiet=True, ebpf=False),
                             status_stream=open(os.devnull, "w"))
    # THEN the recording ends as asked, with the parent's samples, the child counted as left out
    t = load_tables(str(out))
    assert t.error is None and t.end is not None and t.end["reason"] == "duration", (t.error, t.end)
    assert t.end["processes"] == 1 and t.end["processes_left_out"] == 1, t.end
    assert t.sample_count > 0 and counts["samples"] == t.sample_count, (counts, t.sample_count)
