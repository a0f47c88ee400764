"""boot_real: what `sdb-sidecar record` costs a boot-heavy real program: Debian's rubocop (it loads
about a thousand files of its own and of parser before it inspects anything) over a fixed file set,
activesupport 6.1's lib/active_support (247 files, from Debian's ruby-activesupport).

Configurations, interleaved round by round, each timed from outside (wall clock of the command):
  plain     `rubocop ...`
  record    `sdb-sidecar record -- rubocop ...`: sampling at 1 kHz from the gem's load, eBPF on
  no-ebpf   the same with --no-ebpf
  no-in-context  the same with --no-in-context (eBPF naming, running threads copied from outside)
  timer     `rubocop ...` alone beside bare_timer.py: the in-context reads' timer (a cpu-clock event
            on every CPU at their rate) with an empty eBPF program, no sidecar: what the timer's
            interrupts cost, apart from the reads themselves
rubocop runs on one core (taskset), the sidecar on the other; `--cache false` so every round does
the same work. The order of the configurations turns round by round (a single boot spreads +-15 % on this
project's VM, and its speed drifts over minutes). Ratio = median wall / median plain wall; beside it
the median of each round's own ratio (record / the same round's plain), which drift between rounds
does not move, and rubocop's own CPU time (all its threads, user + system, written at its exit by
programs/cpu_at_exit.rb, loaded with -r in every configuration), which the sidecar's start and end
do not include. Target: record at most 1.05x."""
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
BARE_TIMER = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "bare_timer.py"), "1000"]
CPU_AT_EXIT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "programs", "cpu_at_exit.rb")


def rubocop_argv(cfg) -> list:
    rubocop = shutil.which("rubocop")
    if rubocop is None or not all(os.path.isdir(d) for d in FILESET):
        raise RuntimeError("needs Debian's rubocop and ruby-activesupport 6.1 (apt-get install rubocop ruby-rails)")
    return [cfg.ruby, rubocop, "--cache", "false", "--format", "quiet", *FILESET]


def timed(argv, env, cpu_file, beside=None):
    """(wall s, rubocop's CPU s) of one run; cpu_file: where programs/cpu_at_exit.rb writes it.
    beside: a command started first (on the sidecar's CPU), waited for until it prints its first
    line, and ended (SIGTERM) when the run is over."""
    if os.path.exists(cpu_file):
        os.unlink(cpu_file)
    helper = None
    if beside is not None:
        helper = subprocess.Popen(common.taskset(common.SAMPLER_CPU) + beside, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                  preexec_fn=common._die_with_parent)   # no timer left behind if we are killed
        if helper.stdout.readline().strip() != "ready":
            helper.kill()
            raise RuntimeError(f"{beside[1]} did not start: {helper.communicate()[1].strip()[-300:]}")
    try:
        t0 = time.monotonic()
        p = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True, env=env, timeout=600)
        wall = time.monotonic() - t0
    finally:
        if helper is not None:
            helper.terminate()
            helper.wait()
    if p.returncode not in (0, 1):      # 1: rubocop found offenses
        raise RuntimeError(f"{argv[:4]}... exit {p.returncode}: {p.stderr.strip()[-300:]}")
    with open(cpu_file) as f:
        return wall, float(f.read())


def run(cfg) -> str:
    rounds = 1 if cfg.quick else (cfg.rounds or 15)
    names = ["plain", "record", "no-ebpf", "no-in-context", "timer"]
    walls = {n: [] for n in names}
    cpus = {n: [] for n in names}
    attach_ms = []
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "t.msgpack")
        cpu_file = os.path.join(tmp, "cpu")
        env = common.gem_env(cfg, SDB_BENCH_CPU_FILE=cpu_file)
        env["RUBYOPT"] = f"-r{CPU_AT_EXIT} {env.get('RUBYOPT', '')}".strip()
        app = common.taskset(common.TARGET_CPU) + rubocop_argv(cfg)
        side = common.taskset(common.SAMPLER_CPU) + SIDECAR + ["record", "-q", "-o", out]
        argvs = {"plain": app, "record": side + ["--"] + app, "no-ebpf": side + ["--no-ebpf", "--"] + app,
                 "no-in-context": side + ["--no-in-context", "--"] + app, "timer": app}
        for r in range(rounds):
            k = r % len(names)
            for name in names[k:] + names[:k]:
                wall, cpu = timed(argvs[name], env, cpu_file, BARE_TIMER if name == "timer" else None)
                walls[name].append(wall)
                cpus[name].append(cpu)
                if name == "record":
                    from sdb_trace import TraceReader
                    with TraceReader(out) as tr:
                        for rec in tr.records():
                            if rec["t"] == "ebpf_attached":
                                attach_ms.append((rec["at_ns"] - tr.header["start_mono_ns"]) / 1e6)
    plain = summary(walls["plain"])
    rows, table_rows = [], []
    for name in names:
        s = summary(walls[name])
        ratio = s["median"] / plain["median"]
        paired = summary([w / p for w, p in zip(walls[name], walls["plain"])])
        c = summary(cpus[name])
        cpu_ratio = c["median"] / summary(cpus["plain"])["median"]
        rows.append({"config": name, "wall_s": s, "ratio": ratio, "paired_ratio": paired, "cpu_s": c,
                     "cpu_ratio": cpu_ratio})
        table_rows.append([name, fmt(s, 2), f"{ratio:.3f}x", f"{fmt(paired, 3)}",
                           f"{fmt(c, 2)}: {cpu_ratio:.3f}x"])
    table = common.markdown_table(["config", "wall s (median, min-max)", "vs plain",
                                   "each round vs its plain (median, min-max)", "rubocop's CPU s: vs plain"],
                                  table_rows)
    extra = {"ebpf_attached_ms": summary(attach_ms) if attach_ms else None}
    common.write_result(cfg, NAME, {"rounds": rounds, "fileset": FILESET}, rows, table, extra)
    att = f"; eBPF attached {fmt(extra['ebpf_attached_ms'], 0)} ms after sampling began" if attach_ms else ""
    return (f"### boot_real: rubocop over activesupport 6.1's lib/active_support ({rounds} rounds, "
            f"interleaved, order turning; target: record <= {TARGET_RATIO}x{att})\n\n{table}\n")
