"""The progress line on a real terminal (a pty): drawn while a long symbolization runs, at most
10 times a second, erased at the end; never drawn when stderr is not a terminal."""
from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time

import pytest

from conftest import REPO

pytestmark = pytest.mark.once
sys.path.insert(0, str(REPO / "benchmarks"))
import symbolize_formats  # noqa: E402  (its synthetic trace generator)

CMD = [sys.executable, "-m", "sdb_symbolize.cli"]


@pytest.fixture(scope="module")
def long_trace(tmp_path_factory):
    """A synthetic trace whose json output takes well over the line's half-second delay."""
    path = tmp_path_factory.mktemp("progress") / "long.msgpack"
    symbolize_formats.make_trace(str(path), 1_200_000)
    return path


def test_drawn_throttled_and_erased_on_a_terminal(long_trace):
    master, slave = pty.openpty()
    t0 = time.monotonic()
    p = subprocess.Popen([*CMD, str(long_trace), "-f", "json", "--idle", "-o", os.devnull], stderr=slave,
                         stdout=subprocess.DEVNULL, cwd=str(REPO))
    os.close(slave)
    out = b""
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:        # EIO: the child closed the terminal
                    break
                if not data:
                    break
                out += data
            elif p.poll() is not None:
                break
        assert p.wait(timeout=120) == 0
    finally:
        os.close(master)
        if p.poll() is None:
            p.kill()
            p.wait()
    elapsed = time.monotonic() - t0
    draws = out.count(b"\r\x1b[Ksdb-symbolize:")
    assert elapsed > 0.7, f"the run was too short ({elapsed:.2f} s) to show the line"
    assert draws >= 1, out[:300]
    assert draws <= elapsed * 10 + 1, (draws, elapsed)
    assert b"of 1,200,000 samples" in out
    assert out.endswith(b"\r\x1b[K"), out[-80:]          # erased: nothing left on the line


def test_never_drawn_when_stderr_is_not_a_terminal(long_trace):
    r = subprocess.run([*CMD, str(long_trace), "-f", "json", "--idle", "-o", os.devnull], capture_output=True,
                       timeout=120, cwd=str(REPO))
    assert r.returncode == 0 and r.stderr == b""
