#!/usr/bin/env python3
"""agent_cost: the CPU of `sdb-sidecar agent` per profiled thread, at 100 Hz and 1 kHz.

Targets: PROCESSES copies of programs/stacks.rb in mixed mode (THREADS threads each, ~5 ms busy,
~5 ms asleep, 30..50 frames deep), on one core, each a script named agentbench.rb (its service
name, which the agent's --include picks: the machine's other Ruby programs are left alone); the
agent on the other core (taskset), pushing to a receiver on loopback in this process that only
counts bytes (--push pyroscope=URL --push-interval 5). Each round runs each rate once, in turn.
Measured: the agent's CPU (utime + stime of /proc/PID/stat: every thread of it, ended ones too)
over MEASURE s, from 2 s after the agent said it records every target (start-up excluded) to the
SIGTERM that ends it; % of one core, and per profiled thread.

    .venv/bin/python benchmarks/agent_cost.py --ruby /usr/bin/ruby --gem-home build/gem-home
        [--rounds 3] [--measure 15] [--processes 4] [--threads 12] [--rates 100,1000]
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402
from common import fmt, summary  # noqa: E402

sys.path.insert(0, os.path.join(common.ROOT, "tests", "support"))
from push_receiver import RawReceiver  # noqa: E402

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_S


def run_once(cfg, rate: float, script: str, receiver: RawReceiver) -> float:
    env = dict(os.environ, GEM_HOME=cfg.gem_home, GEM_PATH=cfg.gem_home) if cfg.gem_home else dict(os.environ)
    targets = []
    err_path = tempfile.mktemp(prefix="sdb-agent-cost-", suffix=".stderr")
    agent = None
    try:
        for _ in range(cfg.processes):
            p = subprocess.Popen(common.taskset(common.TARGET_CPU) + [cfg.ruby, script, str(cfg.threads), "30",
                                                                       "mixed"],
                                 stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env, text=True)
            targets.append(p)
            if not p.stdout.readline().startswith("ready"):
                raise RuntimeError("stacks.rb did not start")
        with open(err_path, "w") as err:
            agent = subprocess.Popen(common.taskset(common.SAMPLER_CPU) + [
                sys.executable, "-m", "sdb_sidecar.cli", "agent", "--rate", str(rate), "--include", "agentbench",
                "--push", f"pyroscope={receiver.url}", "--push-interval", "5"], stderr=err, cwd=common.ROOT)
        deadline = time.monotonic() + 60
        while open(err_path).read().count("sdb: agent: recording process") < cfg.processes:
            if time.monotonic() > deadline or agent.poll() is not None:
                raise RuntimeError(f"the agent did not record every target: {open(err_path).read()}")
            time.sleep(0.1)
        time.sleep(2.0)
        a, t0 = cpu_s(agent.pid), time.monotonic()
        time.sleep(cfg.measure)
        b, t1 = cpu_s(agent.pid), time.monotonic()
        agent.send_signal(signal.SIGTERM)
        if agent.wait(timeout=120) != 0:
            raise RuntimeError(f"the agent exited {agent.returncode}: {open(err_path).read()}")
        return 100.0 * (b - a) / (t1 - t0)
    finally:
        if agent is not None and agent.poll() is None:
            agent.kill()
            agent.wait()
        for p in targets:
            common.reap(p)
        os.unlink(err_path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ruby", default="/usr/bin/ruby")
    ap.add_argument("--gem-home", default=os.path.join(common.ROOT, "build", "gem-home"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--measure", type=float, default=15.0)
    ap.add_argument("--processes", type=int, default=4)
    ap.add_argument("--threads", type=int, default=12)
    ap.add_argument("--rates", default="100,1000")
    cfg = ap.parse_args()
    rates = [float(r) for r in cfg.rates.split(",")]
    work = tempfile.mkdtemp(prefix="sdb-agent-cost-")
    script = os.path.join(work, "agentbench.rb")
    shutil.copy(os.path.join(common.PROGRAMS, "stacks.rb"), script)
    receiver = RawReceiver(keep=False)
    threads = cfg.processes * cfg.threads
    got = {r: [] for r in rates}
    try:
        for n in range(cfg.rounds):
            for r in rates:
                got[r].append(run_once(cfg, r, script, receiver))
                print(f"round {n + 1} {r:g} Hz: {got[r][-1]:.2f} % of a core", file=sys.stderr)
    finally:
        receiver.close()
        shutil.rmtree(work)
    print(f"agent_cost: {cfg.processes} processes x {cfg.threads} threads ({threads}), mixed, push to pyroscope "
          f"every 5 s, {cfg.measure:g} s windows, {cfg.rounds} rounds; median (min-max)")
    print("| rate | agent CPU, % of a core | per 100 threads |")
    print("|---|---|---|")
    for r in rates:
        s = summary(got[r])
        print(f"| {r:g} Hz | {fmt(s)} | {fmt(s, scale=100.0 / threads)} |")
    print(f"pushed {receiver.bytes / 1e6:.1f} MB in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
