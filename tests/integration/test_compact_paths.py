"""Names read from the target while GC.compact moves objects: a path or label read from an object that
moved (and whose slot a new string took) must never name a frame. Every ISeq path in the trace is a
file of the program or an eval's name. SDB_COMPACT_SECONDS sets how long it is recorded (5 s in make test;
the hardening check was three runs of 30 s in a row)."""
from __future__ import annotations

import pytest

import os
import signal
import time

from conftest import PROGRAMS, read_trace, samples_so_far, wait_for

pytestmark = pytest.mark.every_ruby

SECONDS = float(os.environ.get("SDB_COMPACT_SECONDS", "5"))


def test_paths_read_under_gc_compact_are_files_or_eval_names(ruby_target, sidecar_process, tmp_path):
    # GIVEN a program that defines methods with class_eval strings and compacts the heap every 10 ms
    target = ruby_target("compact_eval.rb")
    out = tmp_path / "trace.msgpack"
    # WHEN it is recorded at 10 kHz for 5 s (SECONDS), names read from its memory (no eBPF: remote reads only)
    sidecar = sidecar_process("attach", "--pid", str(target.pid), "-o", str(out), "--rate", "10000",
                              "--duration", "600", "-q", "--no-ebpf")
    wait_for(lambda: samples_so_far(out) > 0 or sidecar.poll() is not None, 60, what="first samples")
    time.sleep(SECONDS)
    sidecar.send_signal(signal.SIGINT)
    _, err = sidecar.communicate(timeout=60)
    assert sidecar.returncode == 0, err
    trace = read_trace(out)
    # THEN every ISeq's path is the program's file, a file of Ruby's or the gem's, or an eval's name
    paths = {r["path"] for r in trace.records if r["t"] == "iseq" and r["label"] != "(unknown)"}
    assert paths, "no ISeq was named"
    bad = sorted(p for p in paths if not (os.path.isabs(p) and os.path.exists(p))
                 and not p.startswith("(eval") and not p.startswith("<internal:"))
    assert bad == [], bad[:10]
    assert str(PROGRAMS / "compact_eval.rb") in paths
