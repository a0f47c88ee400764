"""The outputs open in their real viewers, in headless Chromium driven by playwright-core
(browser_check.js): the speedscope app from npm loads the speedscope file of a real recording
and draws its flame chart with the expected frames; sdb's own flame graph HTML renders, finds a
frame by search, shows its file:line on hover and zooms on click, without any network request.
Screenshots are kept in build/test-artifacts/."""
from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import subprocess
import threading
from pathlib import Path
from urllib.parse import quote

import pytest

from conftest import REPO
from format_recording import formats_trace, symbolize

pytestmark = pytest.mark.once

NODE_MODULES = REPO / "build" / "speedscope" / "node_modules"
SPEEDSCOPE = NODE_MODULES / "speedscope" / "dist" / "release"
PLAYWRIGHT = NODE_MODULES / "playwright-core"
CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = REPO / "build" / "test-artifacts"
DRIVER = Path(__file__).with_name("browser_check.js")


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    return formats_trace(tmp_path_factory)


@pytest.fixture(scope="module")
def browser_ready():
    missing = [str(p) for p in (SPEEDSCOPE / "index.html", PLAYWRIGHT) if not p.exists()]
    if missing:
        pytest.fail(f"missing {', '.join(missing)}: run `make build/stamps/npm` (make test does)")
    if not os.access(CHROMIUM, os.X_OK) or not shutil.which("node"):
        pytest.fail("chromium or node missing: scripts/setup-machine installs them")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)


def drive(**cfg) -> dict:
    cfg = dict(cfg, playwright=str(PLAYWRIGHT), chromium=CHROMIUM)
    r = subprocess.run(["node", str(DRIVER), json.dumps(cfg)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"browser_check.js failed: {r.stderr[-3000:]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def web_root(tmp_path):
    """A localhost HTTP server on a directory holding the speedscope app (app/) and the profiles."""
    root = tmp_path / "www"
    root.mkdir()
    (root / "app").symlink_to(SPEEDSCOPE)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root)))
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_speedscope_app_draws_the_recording_with_its_frames(recording, browser_ready, web_root):
    trace_path, trace = recording
    root, base = web_root
    # GIVEN the speedscope file of the recording (every thread, idle ones too)
    symbolize(trace_path, "speedscope", "--idle", out=root / "profile.speedscope.json")
    shot = ARTIFACTS / "speedscope-format_cruncher.png"
    # WHEN the speedscope app from npm opens it and a user picks the cruncher thread, Left Heavy
    seen = drive(mode="speedscope", url=f"{base}/app/index.html#profileURL={quote(base + '/profile.speedscope.json', safe='')}",
                 profile="format_cruncher", screenshot=str(shot))
    # THEN it loaded every profile of the file (one per thread of the `wall` type, one per thread that
    # ran of the `cpu` type) and drew the cruncher's frames, each with its file:line
    written = [p["name"] for p in json.loads((root / "profile.speedscope.json").read_text())["profiles"]]
    assert sum(name.endswith(" [wall]") for name in written) == len(trace.threads), written
    assert seen["console_errors"] == []
    assert seen["profiles"] == len(written), seen
    assert "format_cruncher" in seen["header"], seen
    assert seen["canvases"] >= 1
    tips = seen["hovered"]
    loop = [t for t in tips if "format_crunch_loop" in t]
    step = [t for t in tips if "format_crunch_step" in t]
    assert loop and step, f"the flame chart did not show the cruncher's frames: {tips}"
    assert "formats.rb:" in loop[0] and "formats.rb:" in step[0]
    assert tips.index(loop[0]) < tips.index(step[0]), "callee drawn above its caller"
    assert shot.stat().st_size > 5000


def test_flamegraph_html_renders_searches_hovers_and_zooms_offline(recording, browser_ready, tmp_path):
    trace_path, trace = recording
    page = tmp_path / "profile.html"
    symbolize(trace_path, "flamegraph", "--idle", out=page)
    shot = ARTIFACTS / "flamegraph-search.png"
    seen = drive(mode="flamegraph", url=page.as_uri(), search="format_crunch_step", screenshot=str(shot))
    assert seen["console_errors"] == [] and seen["requests"] == [], seen
    assert seen["frames"] >= 10
    # the search highlights the frames of that method, and says how many samples they hold
    assert seen["matches"] and all("format_crunch_step" in m or m == "" for m in seen["matches"])  # "": too narrow
    crunch = sum(1 for s in trace.samples if "format_crunch_step" in (trace.labels_of(s) or []))
    assert seen["matched"].startswith(f"matched: {crunch} samples"), (seen["matched"], crunch)
    # hover: name, file:line and percentages
    assert "format_crunch_step" in seen["tooltip"] and "formats.rb:" in seen["tooltip"] and "%" in seen["tooltip"]
    # click: the frame now spans the whole chart
    assert seen["zoomed_width"] >= seen["chart_width"] - 2, seen
    assert shot.stat().st_size > 5000
