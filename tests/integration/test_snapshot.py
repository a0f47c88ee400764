"""`sdb-sidecar snapshot --json`: every thread's current stack, as Ruby itself would report it."""
from __future__ import annotations

import re

import json

import pytest

from conftest import PROGRAMS, ready_info, run_sidecar

pytestmark = pytest.mark.every_ruby


@pytest.fixture
def parked(ruby_target, tmp_path):
    """parked.rb with its parker thread's own backtrace_locations written to a file."""
    bt_file = tmp_path / "backtrace.json"
    target = ruby_target("parked.rb", str(bt_file))
    info = ready_info(target)
    result = run_sidecar("snapshot", "--pid", str(target.pid), "--json")
    assert result.returncode == 0, result.stderr
    snap = json.loads(result.stdout)
    return {"target": target, "info": info, "snap": snap, "backtrace": json.loads(bt_file.read_text())}


def thread_named(snap: dict, name: str) -> dict:
    found = [t for t in snap["threads"] if t["name"] == name]
    assert len(found) == 1, f"threads named {name!r}: {found}; all: {[t['name'] for t in snap['threads']]}"
    return found[0]


def test_snapshot_lists_every_thread_with_name_and_native_id(parked):
    snap, info = parked["snap"], parked["info"]
    assert snap["pid"] == parked["target"].pid
    assert isinstance(snap["ruby"], str) and snap["ruby"]
    names = sorted(t["name"] for t in snap["threads"])
    assert names == ["parked_main", "parker", "worker"]
    assert thread_named(snap, "parker")["native_id"] == info["parker_tid"]
    assert thread_named(snap, "worker")["native_id"] == info["worker_tid"]
    assert thread_named(snap, "parked_main")["native_id"] == parked["target"].pid
    for t in snap["threads"]:
        assert isinstance(t["serial"], int) and t["serial"] > 0


def test_parked_thread_shows_park_here_at_the_line_of_its_sleep(parked):
    info = parked["info"]
    source = (PROGRAMS / "parked.rb").read_text().splitlines()
    # the program's PARK_LINE is the `sleep` inside `def park_here`
    assert source[info["park_line"] - 1].strip() == "sleep"
    assert source[info["park_line"] - 3].strip().startswith("def park_here")
    frames = thread_named(parked["snap"], "parker")["frames"]
    park = [f for f in frames if f["label"] == "Object#park_here"]
    assert len(park) == 1, frames
    assert park[0]["path"] == str(PROGRAMS / "parked.rb") == info["path"]
    assert park[0]["line"] == info["park_line"]
    # innermost first: the `sleep` call, then park_here, then its caller
    assert frames[0]["label"] in ("Kernel#sleep", "Kernel.sleep"), frames   # Ruby 3.3 itself says Kernel.sleep
    assert frames[1]["label"] == "Object#park_here", frames
    assert frames[2]["label"] == "block in <main>", frames


def test_parked_thread_frames_match_rubys_own_backtrace_locations(parked):
    # GIVEN what Thread#backtrace_locations said about the parked thread
    ruby = parked["backtrace"]
    frames = thread_named(parked["snap"], "parker")["frames"]
    # THEN the snapshot has the same frames in the same order: path and line of every frame;
    # labels are Ruby's full labels (tests/integration/test_golden_snapshot.py checks them against
    # rb_profile_frame_full_label): without their class qualification they are Ruby's own labels
    assert len(frames) == len(ruby), f"snapshot {frames}\nruby {ruby}"
    for i, (got, want) in enumerate(zip(frames, ruby)):
        assert (got["path"], got["line"]) == (want["path"], want["line"]), f"frame {i}: {got} vs {want}"
        assert unqualified(got["label"], want["base_label"]) == unqualified(want["label"], want["base_label"]), \
            f"frame {i}: {got} vs {want}"


def unqualified(label: str, base: str) -> str:
    """A label without the class before its method name (`block in Object#park_here` ->
    `block in park_here`): what Ruby < 3.4 shows in Thread#backtrace_locations."""
    return re.sub(r"[A-Za-z0-9_:#<>]+[#.](?=" + re.escape(base) + r"$)", "", label) if base else label


def test_busy_thread_snapshot_shows_its_loop(parked):
    frames = thread_named(parked["snap"], "worker")["frames"]
    labels = [f["label"] for f in frames]
    assert "Object#work_loop" in labels, labels
    # whatever it is doing, its outermost frame is the thread's block
    assert labels[-1] == "block in <main>", labels  # the thread's own block is its root: no frame of the gem


def test_snapshot_text_names_each_thread(ruby_target):
    target = ruby_target("parked.rb")
    result = run_sidecar("snapshot", "--pid", str(target.pid))
    assert result.returncode == 0, result.stderr
    assert 'Thread "parker"' in result.stdout
    assert "park_here" in result.stdout
