"""boot_real: what `sdb-sidecar record` costs a boot-heavy real program: Debian's rubocop (it loads
about a thousand files of its own and of parser before it inspects anything) over a fixed file set,
activesupport 6.1's lib/active_support (247 files, from Debian's ruby-activesupport).

Configurations, interleaved round by round, each timed from outside (wall clock of the command):
  plain     `rubocop ...`
  record    `sdb-sidecar record -- rubocop ...`: sampling at 1 kHz from the gem's load, eBPF on
  no-ebpf   the same with --no-ebpf
rubocop runs on one core (taskset), the sidecar on the other; `--cache false` so every round does
the same work. Ratio = median wall / median plain wall. Target: record at most 1.05x."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time

import common
from common import fmt, summary

NAME = "boot_real"
TARGET_RATIO = 1.05
FILESET = ["/usr/share/rubygems-integration/all/gems/activesupport-6.1.7.10/lib/active_support"]
SIDECAR = [sys.executable, "-m", "sdb_sidecar.cli"]


def rubocop_argv(cfg) -> list:
    rubocop = shutil.which("rubocop")
    if rubocop is None or not all(os.path.isdir(d) for d in FILESET):
        raise RuntimeError("needs Debian's rubocop and ruby-activesupport 6.1 (apt-get install rubocop ruby-rails)")
    return [cfg.ruby, rubocop, "--cache", "false", "--format", "quiet", *FILESET]


def timed(argv, env) -> float:
    t0 = time.monotonic()
    p = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       text=True, env=env, timeout=600)
    wall = time.monotonic() - t0
    if p.returncode not in (0, 1):      # 1: rubocop found offenses
        raise RuntimeError(f"{argv[:4]}... exit {p.returncode}: {p.stderr.strip()[-300:]}")
    return wall


def run(cfg) -> str:
    rounds = 1 if cfg.quick else (cfg.rounds or 7)
    app = common.taskset(common.TARGET_CPU) + rubocop_argv(cfg)
    env = common.gem_env(cfg)
    walls = {"plain": [], "record": [], "no-ebpf": []}
    attach_ms = []
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "t.msgpack")
        side = common.taskset(common.SAMPLER_CPU) + SIDECAR + ["record", "-q", "-o", out]
        for _ in range(rounds):
            walls["plain"].append(timed(app, env))
            walls["record"].append(timed(side + ["--"] + app, env))
            from sdb_trace import TraceReader
            with TraceReader(out) as r:
                for rec in r.records():
                    if rec["t"] == "ebpf_attached":
                        attach_ms.append((rec["at_ns"] - r.header["start_mono_ns"]) / 1e6)
            walls["no-ebpf"].append(timed(side + ["--no-ebpf", "--"] + app, env))
    plain = summary(walls["plain"])
    rows, table_rows = [], []
    for name, w in walls.items():
        s = summary(w)
        ratio = s["median"] / plain["median"]
        rows.append({"config": name, "wall_s": s, "ratio": ratio})
        table_rows.append([name, fmt(s, 2), f"{ratio:.3f}x"])
    table = common.markdown_table(["config", "wall s (median, min-max)", "vs plain"], table_rows)
    extra = {"ebpf_attached_ms": summary(attach_ms) if attach_ms else None}
    common.write_result(cfg, NAME, {"rounds": rounds, "fileset": FILESET}, rows, table, extra)
    att = f"; eBPF attached {fmt(extra['ebpf_attached_ms'], 0)} ms after sampling began" if attach_ms else ""
    return (f"### boot_real: rubocop over activesupport 6.1's lib/active_support ({rounds} rounds, "
            f"interleaved; target: record <= {TARGET_RATIO}x{att})\n\n{table}\n")
