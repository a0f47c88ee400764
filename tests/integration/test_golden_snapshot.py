"""Golden tests: every frame of every thread named exactly as Ruby names it.

Target: tests/programs/golden.rb, threads parked in sleep, Queue#pop, Mutex#lock and IO.select,
one busy loop, one deep recursion, one thread parked in a class body of a required file, and one
parked at the end of a zoo of constructs (module method, singleton methods, define_method,
method_missing, instance_eval, eval, lambda, proc, a refinement, an anonymous class, Struct,
blocks nested three deep).

Ground truth, taken by the program itself once its threads are parked:
- Ruby's own full labels: tests/support/golden (built here, per Ruby, into a temporary
  directory) calls rb_profile_thread_frames (Ruby >= 3.3) or, on 3.1 (no such API),
  rb_profile_frames from a C-level c_call TracePoint on the parking call, and labels each frame
  with rb_profile_frame_full_label. rb_profile_frames hands a block frame its method's entry, so
  Ruby's full label of `block in bar` is `Foo#bar`: the expected label keeps the block's prefix
  from the frame's own label (`block in Foo#bar`), as sdb does (docs/trace-format.md, Labels).
- paths and lines: Thread#backtrace_locations.
Busy and recursing threads move: only their stable part is compared, the frames from
`Object#busy_spin` (the method that loops; its line moves) outward, with paths and lines."""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import time

import pytest

from conftest import PROGRAMS, SDB_RUBY, SIDECAR, SYMBOLIZE, RubyTarget, ready_info, ruby_cmd, ruby_env, run_sidecar
from terminal import Tmux, rows
from sdb_symbolize.reporters.json_lines import read_samples
from sdb_symbolize.resolve import Resolver
from sdb_trace import iter_samples, load_tables

pytestmark = pytest.mark.every_ruby

PREFIX = re.compile(r"^((?:block|rescue|ensure)(?: \(\d+ levels\))? in )")
PARKED = ["sleep", "queue", "mutex", "select", "zoo", "required", "svar"]
MOVING = ["busy", "recursion"]



@pytest.fixture(scope="module")
def golden(tmp_path_factory, golden_ext):
    """golden.rb started once for the module: its ground truth, one snapshot, and a short
    recording (trace labels, composed offline by sdb-symbolize's resolver)."""
    tmp = tmp_path_factory.mktemp("golden")
    out = tmp / "golden.json"
    stderr_path = tmp / "golden.stderr"
    with open(stderr_path, "w") as err:
        proc = subprocess.Popen(ruby_cmd(PROGRAMS / "golden.rb", str(out)), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=err, text=True, cwd=str(tmp),
                                env=ruby_env(extra={"SDB_GOLDEN_DIR": golden_ext}))
    target = RubyTarget(proc, "golden.rb", stderr_path)
    try:
        target.ready_line = target.wait_for_line("ready", timeout=60)
        info = ready_info(target)
        assert info["sdb_enabled"], target.stderr()
        snap = run_sidecar("snapshot", "--pid", str(target.pid), "--json")
        assert snap.returncode == 0, snap.stderr
        trace = tmp / "trace.msgpack"
        rec = run_sidecar("attach", "--pid", str(target.pid), "-r", "200", "-d", "0.5", "-o", str(trace), "--quiet")
        assert rec.returncode == 0, rec.stderr
        snapshot = json.loads(snap.stdout)
        top = top_rows(target.pid, {where(f) for name in PARKED for f in got_frames(snapshot, name)}) \
            if shutil.which("tmux") else None
    finally:
        target.cleanup()
    return {"truth": json.loads(out.read_text()), "snap": snapshot, "trace": trace, "top": top}


def where(frame: tuple) -> str:
    """A (label, path, line) frame as a row of top's table in lines mode shows it."""
    label, path, line = frame
    return f"{label} ({path}:{line})" if path else label


def top_rows(pid: int, wanted: set) -> set:
    """The rows of `top`'s table (lines mode, idle threads shown) once every row in `wanted` is on
    the screen, or after a minute: the texts of the rows then shown."""
    tmux = Tmux(f"sdb-golden-{os.getpid()}-{time.monotonic_ns()}", width=500, height=300)
    try:
        tmux.type_line(shlex.join([*SIDECAR, "top", "--pid", str(pid), "--rate", "200"]))
        tmux.wait_screen(lambda s: "Showing functions" in s, "top's first screen", timeout=60)
        tmux.send("l")
        tmux.send("i")
        tmux.wait_screen(lambda s: "Showing lines" in s and "idle shown" in s, "lines mode, idle shown", timeout=30)
        shown: set = set()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            shown = {r[0] for r in rows(tmux.screen())}
            if wanted <= shown:
                break
            time.sleep(0.2)
        tmux.send("q")
        return shown
    finally:
        tmux.kill()


def expected_frames(truth: dict, moving: bool = False) -> list:
    """(label, path, line) per frame, innermost first: Ruby's full label (block prefix kept),
    the path and line of Thread#backtrace_locations. `moving`: only from Object#busy_spin out
    (Ruby 3.1 took its two views at different moments)."""
    ruby, locs = truth["golden"], truth["backtrace"]
    assert ruby is not None, "the golden extension recorded nothing for this thread"
    if moving:
        ruby = ruby[[r["label"] for r in ruby].index("Object#busy_spin"):]
        locs = locs[[l["base_label"] for l in locs].index("busy_spin"):]
    assert len(ruby) == len(locs), f"Ruby's two views differ:\n{ruby}\n{locs}"
    out = []
    for r, loc in zip(ruby, locs):
        label = r["label"]
        m = PREFIX.match(loc["label"])
        if m and not label.startswith(m.group(1)):
            label = m.group(1) + label
        out.append((label, loc["path"], loc["line"]))
    return out


def got_frames(snap: dict, name: str) -> list:
    found = [t for t in snap["threads"] if t["name"] == name]
    assert len(found) == 1, f"threads named {name!r}: {[t['name'] for t in snap['threads']]}"
    return [(f["label"], f["path"], f["line"]) for f in found[0]["frames"]]


def diff(got: list, want: list) -> str:
    rows = [f"{'':>3} {'sdb':<60} ruby"]
    for i in range(max(len(got), len(want))):
        g = got[i] if i < len(got) else None
        w = want[i] if i < len(want) else None
        rows.append(f"{'  ' if g == w else '!!'}{i:>2} {str(g):<60} {w}")
    return "\n".join(rows)


@pytest.mark.parametrize("name", PARKED)
def test_parked_thread_frames_equal_rubys_own(golden, name):
    # GIVEN a thread parked at a known place, and Ruby's own view of its frames
    want = expected_frames(golden["truth"][name])
    # WHEN sdb-sidecar snapshot reads it from outside
    got = got_frames(golden["snap"], name)
    # THEN every frame is there, in order, with Ruby's full label, path and line
    assert got == want, diff(got, want)


# Each parked thread's labels, innermost first, spelled out in full, so that a ground truth gone
# wrong cannot hide a regression. The same on every tested Ruby (3.3 says `Kernel#sleep` too:
# nothing prepends to Kernel). ANON matches Ruby's names of anonymous objects.
ANON = re.compile(r"#<(Class|Object|Refinement|#<Class:0x_>):0x[0-9a-f]{16}>")
EXPECTED_LABELS = {
    "sleep": ["Kernel#sleep", "Object#park_sleep", "block in <main>"],
    "queue": ["Thread::Queue#pop", "Object#park_queue", "block in <main>"],
    "mutex": ["Thread::Mutex#lock", "Object#park_mutex", "block in <main>"],
    "select": ["IO.select", "Object#park_select", "block in <main>"],
    "required": ["Kernel#sleep", "<class:Required>", "<module:Zoo>", "<top (required)>", "Kernel#require_relative",
                 "block in <main>"],
    "zoo": ["Kernel#sleep", "block (2 levels) in <main>", "#<Object:0x_>.solo",
            "block (3 levels) in Zoo::Pair#pair_run", "Array#each", "block (2 levels) in Zoo::Pair#pair_run",
            "Array#each", "block in Zoo::Pair#pair_run", "Array#each", "Zoo::Pair#pair_run", "#<Class:0x_>#anon_run",
            "#<Refinement:0x_>#zoo_shout", "block (2 levels) in Zoo::Box#via_eval", "block in Zoo::Box#via_eval",
            "Zoo::Box#via_eval", "Zoo::Box#evaluated", "Kernel#eval", "Zoo::Box#evaluated",
            "block in Zoo::Box#method_missing", "BasicObject#instance_eval", "Zoo::Box#method_missing",
            "block in <class:Box>", "Zoo::Box.build", "Zoo::Greeter#greet", "block in <main>"],
    # a method that used $~ (its method entry inside an imemo_svar) and its block keep their class
    "svar": ["Kernel#sleep", "block in Object#park_svar", "Array#each", "Object#park_svar", "block in <main>"],
}


@pytest.mark.parametrize("name", PARKED)
def test_parked_labels_are_exactly_rubys_full_labels(golden, name):
    # GIVEN a parked thread; WHEN sdb-sidecar snapshot names its frames
    got = [anon(f[0]) for f in got_frames(golden["snap"], name)]
    # THEN the whole list is the expected one, label for label
    want = EXPECTED_LABELS[name]
    if name == "zoo" and ruby_version() >= (4, 0):
        # Ruby 4.0 names the refinement after its raw klass, a singleton class (rb_tmp_class_path)
        want = [REFINED_40 if label == "#<Refinement:0x_>#zoo_shout" else label for label in want]
    assert got == want, diff(got, want)


REFINED_40 = "#<#<Class:0x_>:0x_>#zoo_shout"


def anon(label: str) -> str:
    """A label with the addresses of anonymous objects, nested ones too, as 0x_."""
    while True:
        out = ANON.sub(lambda m: f"#<{m.group(1)}:0x_>", label)
        if out == label:
            return out
        label = out


def ruby_version() -> tuple:
    v = subprocess.run([SDB_RUBY, "-e", "print RUBY_VERSION"], capture_output=True, text=True).stdout
    return tuple(int(x) for x in v.split(".")[:2])


def test_no_thread_has_a_frame_of_the_gem(golden):
    # GIVEN every thread of the snapshot (the gem registers threads from C, with no Ruby wrapper)
    snap = golden["snap"]
    assert len(snap["threads"]) == 1 + len(PARKED) + len(MOVING), [t["name"] for t in snap["threads"]]
    for t in snap["threads"]:
        labels = [f["label"] for f in t["frames"]]
        paths = [f["path"] or "" for f in t["frames"]]
        # THEN no frame is the gem's, and each thread's root is the program's own first frame
        assert not any("Sdb" in (l or "") or "sdb" in (l or "") for l in labels), (t["name"], labels)
        assert not any(p.endswith("/sdb.rb") or "/gems/sdb-" in p or "/gem/lib/" in p for p in paths), \
            (t["name"], paths)
        assert labels[-1] == ("<main>" if t["name"] == "golden_main" else "block in <main>"), (t["name"], labels)


@pytest.mark.parametrize("name", MOVING)
def test_moving_thread_stable_part_equals_rubys_own(golden, name):
    # GIVEN a thread that loops (busy) or loops 120 calls deep (recursion): its top moves
    want = expected_frames(golden["truth"][name], moving=True)
    got = got_frames(golden["snap"], name)
    # THEN from the looping method outward the frames are Ruby's; the loop's own line moves
    gi = [f[0] for f in got].index("Object#busy_spin")
    assert got[gi][:2] == want[0][:2]
    assert got[gi + 1:] == want[1:], diff(got[gi + 1:], want[1:])
    if name == "recursion":
        assert [f[0] for f in got[gi + 1:]].count("Object#recurse") == 121


def test_recorded_trace_names_frames_as_the_snapshot(golden):
    # GIVEN a recording of the same process: frames, ISeq and method records
    tables = load_tables(str(golden["trace"]))
    assert tables.error is None, tables.error
    resolver = Resolver(tables)
    serial = {th["name"]: s for s, th in tables.threads.items()}
    stacks = {}

    def on_batch(base, dts, threads, sids, states):
        for dt, th, sid in zip(dts, threads, sids):
            stacks.setdefault(th, (base + dt, sid))

    iter_samples(str(golden["trace"]), on_batch)
    # WHEN sdb-symbolize's resolver names a parked thread's stack offline
    for name in PARKED:
        t_ns, sid = stacks[serial[name]]
        got = [(f.label, f.path, f.line) for f in reversed(resolver.stack(sid, t_ns))]
        # THEN the labels, paths and lines are the ones Ruby gives
        want = expected_frames(golden["truth"][name])
        assert got == want, diff(got, want)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (scripts/setup-machine installs it)")
def test_top_names_every_frame_as_the_snapshot_and_the_recording(golden):
    # GIVEN top's table of the golden program (lines mode, idle shown), taken while it ran
    shown = golden["top"]
    tables = load_tables(str(golden["trace"]))
    resolver = Resolver(tables)
    serial = {th["name"]: s for s, th in tables.threads.items()}
    first = {}
    iter_samples(str(golden["trace"]), lambda base, dts, threads, sids, states: [
        first.setdefault(th, (base + dt, sid)) for dt, th, sid in zip(dts, threads, sids)])
    for name in PARKED:
        # WHEN a parked thread's frames are named by `snapshot --json` and by sdb-symbolize's resolver
        snap = got_frames(golden["snap"], name)
        t_ns, sid = first[serial[name]]
        recorded = [(f.label, f.path, f.line) for f in reversed(resolver.stack(sid, t_ns))]
        # THEN the three agree: the same label, path and line for each frame
        assert snap == recorded, diff(snap, recorded)
        missing = [where(f) for f in snap if where(f) not in shown]
        assert not missing, f"{name}: not in top's table: {missing}\ntop's rows: {sorted(shown)}"


def test_ruby_profile_frames_labels_are_exactly_rubys_full_labels(golden):
    # GIVEN the same recording, symbolized with --labels ruby-profile-frames
    r = subprocess.run([*SYMBOLIZE, str(golden["trace"]), "--idle", "--labels", "ruby-profile-frames",
                        "--format", "json", "--no-progress"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    first = {}
    for s in read_samples(r.stdout.splitlines()):
        first.setdefault(s["thread_name"], s["frames"])
    # THEN each parked thread's labels, innermost first, are rb_profile_frame_full_label's strings as
    # Ruby gave them (no block prefix kept for a method's blocks: `Zoo::Pair#pair_run`)
    for name in PARKED:
        want = [f["label"] for f in golden["truth"][name]["golden"]]
        got = [f[0] for f in reversed(first[name])]
        assert got == want, diff(got, want)
    # AND the default stays sdb's: the block prefix is there
    zoo = [f[0] for f in got_frames(golden["snap"], "zoo")]
    assert "block (3 levels) in Zoo::Pair#pair_run" in zoo
