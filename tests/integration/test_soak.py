"""A soak under sampling at 10 kHz: tests/programs/soak.rb does at once what moves a Ruby process's
stacks and objects (threads and fibers made and ended, methods defined by eval while GC.compact moves
the heap, exceptions raised 12 deep, children forked), then Ractors that each make a thread. Recorded
from outside, it prints what it prints unrecorded and without the gem, every process exits 0, and
every frame of the trace carries the program's or Ruby's own names (an `(unknown)` is counted, not a
wrong name). SDB_SOAK_SCALE=3 makes it the minute-long soak (1: about 20 s here, in make test)."""
from __future__ import annotations

import os
import re
import subprocess

from conftest import PROGRAMS, SYMBOLIZE, read_trace, ruby_cmd, ruby_env, samples_so_far, wait_for
from sdb_symbolize.reporters.json_lines import read_samples

SCALE = os.environ.get("SDB_SOAK_SCALE", "1")
SOAK = PROGRAMS / "soak.rb"
# the program's own methods, and what its eval defines
OWN = re.compile(r"^(?:(?:block|rescue|ensure)(?: \(\d+ levels\))? in )*(?:Object#|Soak#)?"
                 r"(deep_raise|thread_churn|fiber_churn|compact_eval|exceptions|forks|ractors|m\d+|<main>)$")
# a method of Ruby's own classes, as C functions and Ruby's built-in Ruby methods are named
RUBYS = re.compile(r"^(?:(?:block|rescue|ensure)(?: \(\d+ levels\))? in )*"
                   r"(?:[A-Z][A-Za-z0-9_]*(?:::[A-Z][A-Za-z0-9_]*)*|#<(?:Class|Module):0x[0-9a-f]+>)"
                   r"[#.](?:[a-z_][A-Za-z0-9_]*[?!=]?|[^A-Za-z0-9_\s;()]+)$")
# (the second form: what Ruby's own rb_profile_frame_classpath gives for an object that is no class.
# A `-> { }` literal calls `lambda` on the VM's frozen core, RubyVM::FrozenCore, whose singleton
# class holds it (vm.c: rb_define_method_id(klass, idLambda, f_lambda, 0)); the core is flagged
# T_ICLASS, so Ruby names it `#<Class:0x...>`: the C frame `#<Class:0x...>.lambda`, sampled now and
# then while soak.rb builds its `parts`)


INTERNAL = re.compile(r"^<internal:[a-z_]+>$")     # Ruby's own files of built-in Ruby methods
BARE = re.compile(r"^(?:(?:block|rescue|ensure)(?: \(\d+ levels\))? in )*[a-z_][A-Za-z0-9_]*[?!=]?$")


def samples_in(jsonl):
    with open(jsonl) as f:
        yield from read_samples(f)


def unrecorded(tmp_path, with_gem: bool) -> str:
    args = [SCALE, "sdb"] if with_gem else [SCALE]
    r = subprocess.run(ruby_cmd(SOAK, *args), input="go\n", capture_output=True, text=True, timeout=1800,
                       cwd=str(tmp_path), env=ruby_env(with_gem))
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_soak_at_10khz_changes_no_output_and_names_frames_only_with_real_names(ruby_target, sidecar_process,
                                                                               tmp_path):
    # GIVEN the soak's output unrecorded, with the gem and without it
    plain = unrecorded(tmp_path, with_gem=False)
    with_gem = unrecorded(tmp_path, with_gem=True)
    assert plain == with_gem
    assert plain.splitlines()[-1] == "done", plain
    # WHEN it runs recorded at 10 kHz from its start to its end
    target = ruby_target("soak.rb", SCALE, "sdb")
    trace = tmp_path / "trace.msgpack"
    sidecar = sidecar_process("attach", "--pid", str(target.pid), "-o", str(trace), "--rate", "10000", "-q")
    wait_for(lambda: samples_so_far(trace) > 0 or sidecar.poll() is not None, 120, what="the first samples")
    target.send("go\n")
    assert target.proc.wait(1800) == 0, target.stderr()
    lines = []
    while (line := target.lines.get(timeout=60)) is not None:
        lines.append(line)
    _, err = sidecar.communicate(timeout=120)
    # THEN its output is the same, and the sidecar ended with it, exit 0
    assert "\n".join(["ready", *lines]) + "\n" == plain
    assert sidecar.returncode == 0, err
    t = read_trace(trace)
    builtin = {r["label"] for r in t.records
               if r["t"] == "iseq" and r.get("c_trace") and INTERNAL.match(r.get("path") or "")}
    assert t.end is not None and t.end["reason"] == "target-exited", t.end
    # AND every frame is named with the program's names or Ruby's own (Ruby 3.4 labels the ISeq of a
    # class_eval string "<compiled>"), or left unnamed and counted: "(unknown...)", "(C function)"
    # (written to a file, read line by line: the json grows with the load, which stretches the soak and so
    # its recording: over 1 GB from a 19 MB trace beside two other make tests and three `yes`, written
    # in 500-600 s on a quarter of a CPU; the time limit is there to catch a hang, not to time it)
    out = tmp_path / "trace.jsonl"
    r = subprocess.run([*SYMBOLIZE, str(trace), "--format", "json", "--idle", "--no-progress", "-o", str(out)],
                       capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stderr
    labels, samples, unknown = set(), 0, 0
    for sample in samples_in(out):
        samples += 1
        names = [f[0] for f in sample["frames"]]
        unknown += any(n.startswith("(unknown") or n == "(C function)" for n in names)
        # a frame of a built-in Ruby method whose method entry was not proven (unreadable: counted in the
        # end record's unnamed methods; or read while the stack moved) keeps its ISeq's own label, as
        # Ruby's rb_profile_frame_full_label gives it without an entry: `zero?` of <internal:numeric>
        # (seen once, 3.1 --yjit under load), never another method's name
        # (Ruby 4.0's Ractor.new, #value, #join...: such a method Ruby shows as a C method is located at its
        # caller, so its ISeq's own label stands at the caller's path: one of the built-in ISeqs' labels)
        labels.update(f[0] for f in sample["frames"]
                      if not (BARE.match(f[0]) and (INTERNAL.match(f[1] or "") or f[0] in builtin)))
    stray = sorted(lb for lb in labels if not (OWN.match(lb) or RUBYS.match(lb) or lb in (
        "(garbage collection)", "(truncated)", "(unknown)", "(C function)", "<internal:kernel>", "<top (required)>",
        "<compiled>"))
                   and not lb.startswith("(unknown ISeq 0x"))
    out.unlink()
    print(f"soak x{SCALE}: {samples} samples, {unknown} with an unnamed frame; end record {t.end}")
    assert stray == [], stray[:20]
    assert samples > 10_000, samples
    # the unnamed are counted in the end record, and few
    assert unknown <= 0.01 * samples, (unknown, samples, t.end["unnamed"])
