"""A Ractor app, and the same app under RUBY_BOX=1 (Ruby::Box, Ruby 4.0+), record with right labels.

Target: tests/programs/ractor_app.rb: threads of the main Ractor parked at known places in named
work (methods of classes and modules, their singleton methods, blocks, a refinement, a core class
reopened, a unit of work of Sdb.label) while three non-main Ractors compute. Under RUBY_BOX=1 its
shop (tests/programs/ractor_app_shop.rb) is loaded into a Ruby::Box of its own, which reopens
Integer there, and the main box reopens Integer, Object and Array (through a refinement): the
class data of those classes is then per box (Ruby 4.0's classext; docs/ruby-internals.md, Ruby::Box),
and a method's label needs its class's name read from the right place.

Ground truth, as the golden tests take it (test_golden_snapshot.py): Ruby's own full labels
(tests/support/golden), paths and lines (Thread#backtrace_locations), taken by the program once its
threads are parked; each thread's labels are also spelled out in full here. Checked: the snapshot
and the recording name every frame of every parked thread as Ruby does, the non-main Ractors'
code appears nowhere (their threads are left alone by the gem), and no frame is left unnamed: the
end record counts none."""
from __future__ import annotations

import json
import subprocess

import pytest

from conftest import PROGRAMS, RubyTarget, read_trace, ready_info, ruby_cmd, ruby_env, run_sidecar
from sdb_symbolize.resolve import Resolver
from test_golden_snapshot import anon, diff, expected_frames, got_frames, ruby_version

pytestmark = pytest.mark.every_ruby

PARKED = ["shop", "boxed_core", "report"]
SHOP = ["Kernel#sleep", "Object#park", "block (2 levels) in <main>", "Shop::Cart.tax", "Shop::Pricing.total",
        "block in Shop::Cart#checkout", "Array#each", "Shop::Cart#checkout"]
EXPECTED_LABELS = {
    "shop": [*SHOP, "block in <main>"],
    "boxed_core": [*SHOP, "Integer#shop_cents", "Shop.cents", "block in <main>"],
    "report": ["Kernel#sleep", "Object#park", "block in Integer#park_here", "Array#each",
               "#<Refinement:0x_>#tally_each", "Integer#park_here", "block (2 levels) in Report#render",
               "Integer#times", "block in Report#render", "Sdb.label", "Report#render", "Report.build",
               "block in <main>"],
}
# Ruby 4.0 names a refinement after its raw klass, a singleton class (rb_tmp_class_path)
REFINED_40 = "#<#<Class:0x_>:0x_>#tally_each"
UNNAMED = ("(C function)", "(unknown")


def record_app(tmp_path, golden_ext, extra_env: dict) -> dict:
    """ractor_app.rb started with `extra_env`: its ground truth, its ready line, one snapshot and a
    short recording."""
    out = tmp_path / "truth.json"
    stderr_path = tmp_path / "app.stderr"
    with open(stderr_path, "w") as err:
        proc = subprocess.Popen(ruby_cmd(PROGRAMS / "ractor_app.rb", str(out)), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=err, text=True, cwd=str(tmp_path),
                                env=ruby_env(extra={"SDB_GOLDEN_DIR": golden_ext, **extra_env}))
    target = RubyTarget(proc, "ractor_app.rb", stderr_path)
    try:
        target.ready_line = target.wait_for_line("ready", timeout=60)
        info = ready_info(target)
        assert info["sdb_enabled"], target.stderr()
        snap = run_sidecar("snapshot", "--pid", str(target.pid), "--json")
        assert snap.returncode == 0, snap.stderr
        trace = tmp_path / "trace.msgpack"
        rec = run_sidecar("attach", "--pid", str(target.pid), "-r", "200", "-d", "0.5", "-o", str(trace), "--quiet")
        assert rec.returncode == 0, rec.stderr
        assert target.proc.poll() is None, f"the app died while recorded: {target.stderr()}"
    finally:
        target.cleanup()
    return {"info": info, "truth": json.loads(out.read_text()), "snap": json.loads(snap.stdout),
            "trace": read_trace(trace)}


def check_labels(app: dict) -> None:
    """Every frame of the snapshot and of every sample of the recording is Ruby's own, nothing is
    unnamed, and no thread of a non-main Ractor is shown."""
    truth, snap, trace = app["truth"], app["snap"], app["trace"]
    # each non-main Ractor named its thread and labelled a step with the gem loaded, none raised
    assert app["info"]["ractor_steps"] == ["ok"] * 3, app["info"]
    # the snapshot: the main thread and the parked ones, nothing of the non-main Ractors
    assert sorted(t["name"] for t in snap["threads"]) == sorted(["ractor_main", *PARKED]), \
        [t["name"] for t in snap["threads"]]
    for name in PARKED:
        want = expected_frames(truth[name])
        got = got_frames(snap, name)
        assert got == want, f"{name}:\n{diff(got, want)}"
        labels = EXPECTED_LABELS[name]
        if ruby_version() >= (4, 0):
            labels = [REFINED_40 if label == "#<Refinement:0x_>#tally_each" else label for label in labels]
        assert [anon(f[0]) for f in got] == labels, f"{name}:\n{diff([anon(f[0]) for f in got], labels)}"
    # the recording, named offline: every sample of a parked thread is its snapshot's stack
    resolver = Resolver(trace.tables)
    names = {serial: th["name"] for serial, th in trace.tables.threads.items()}
    seen, unnamed = set(), 0
    for t_ns, serial, sid, _state in trace.samples:
        frames = [(f.label, f.path, f.line) for f in reversed(resolver.stack(sid, t_ns))]
        unnamed += sum(label.startswith(UNNAMED) for label, _p, _l in frames)
        assert not any("Cruncher" in label for label, _p, _l in frames), frames
        name = names[serial]
        seen.add(name)
        if name in PARKED:
            want = got_frames(snap, name)
            assert frames == want, f"{name} at {t_ns}:\n{diff(frames, want)}"
    assert seen == {"ractor_main", *PARKED}, seen
    # nothing unnamed, and the end record says so
    assert unnamed == 0
    assert trace.end["unnamed"] == {"iseqs": 0, "methods": 0}, trace.end
    # and nothing published from the other Ractors: not one of their labelled steps
    assert not [sp for sp in trace.tables.spans.values() if sp["endpoint"] == "crunch"]


def test_a_ractor_app_records_with_right_labels(tmp_path, golden_ext):
    # GIVEN a Ractor app: named work parked in the main Ractor while three other Ractors compute
    app = record_app(tmp_path, golden_ext, {})
    assert not app["info"]["boxed"]
    # WHEN sdb snapshots and records it THEN every frame is Ruby's own, none unnamed, no Ractor's thread shown
    check_labels(app)


def test_a_ruby_box_app_records_with_right_labels(tmp_path, golden_ext):
    if ruby_version() < (4, 0):
        pytest.skip("Ruby::Box (RUBY_BOX=1) exists from Ruby 4.0")
    # GIVEN the same app with Ruby::Box enabled: its shop in a box of its own, core classes reopened per box
    app = record_app(tmp_path, golden_ext, {"RUBY_BOX": "1"})
    assert app["info"]["boxed"], "RUBY_BOX=1 did not enable Ruby::Box"
    # WHEN sdb snapshots and records it THEN every frame is Ruby's own, none unnamed, no Ractor's thread shown
    check_labels(app)
