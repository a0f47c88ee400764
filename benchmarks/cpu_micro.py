"""cpu_micro: what sampling costs a CPU-bound Ruby thread, and what the gem costs Thread.new.

loop: programs/recursion.rb runs a tight loop at the bottom of a 150-frame recursion (20 descents);
its wall time (monotonic clock around the workload, inside Ruby) with no profiler (sdb not loaded),
with the gem loaded and no sidecar, with sdb-sidecar attached at 1, 10 and 100 kHz, and with
stackprof at 1 ms (StackProf.run, wall and cpu mode, raw off, profile written at the end). Every
configuration is a fresh Ruby pinned to the target core, the sidecar pinned to the other one, and
started before the workload (recording when the workload starts). Configurations are interleaved
round by round, the order rotated each round; ratio = time / the same round's no-profiler time.

threads: SIZE x `Thread.new {}.join`, with and without the gem (no sidecar), interleaved likewise.

SDB_CPU_MICRO_WORKLOADS=threads (or loop) runs one of the two only."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import common
from common import fmt, summary

NAME = "cpu_micro"
LOOP_CONFIGS = [  # name, Ruby-side profiler, sidecar rate (0: none)
    ("none", "none", 0), ("gem", "sdb", 0), ("sdb 1 kHz", "sdb", 1000), ("sdb 10 kHz", "sdb", 10000),
    ("sdb 100 kHz", "sdb", 100000), ("stackprof wall 1 ms", "stackprof-wall", 0),
    ("stackprof cpu 1 ms", "stackprof-cpu", 0)]
THREAD_CONFIGS = [("none", "none", 0), ("gem", "sdb", 0)]
TARGETS = {"sdb 1 kHz": 1.005, "gem": 1.005}  # loop wall-time ratio
# Thread.new {}.join with the gem (issue #15): at most 2 % slower on 3.3 and 3.4 (C thread hooks), 5 % on 3.1
THREADS_TARGETS = {"3.1": 1.05}
THREADS_TARGET_DEFAULT = 1.02


def threads_target(cfg) -> float:
    r = subprocess.run([cfg.ruby, "-e", "print RUBY_VERSION"], capture_output=True, text=True)
    return THREADS_TARGETS.get(".".join(r.stdout.split(".")[:2]), THREADS_TARGET_DEFAULT)


def stackprof_samples(cfg, path: str) -> int:
    r = subprocess.run([cfg.ruby, "-e", "print Marshal.load(File.binread(ARGV[0]))[:samples]", path],
                       capture_output=True, text=True, env=common.gem_env(cfg))
    return int(r.stdout) if r.returncode == 0 and r.stdout.strip().isdigit() else -1


def one(cfg, workload: str, size: int, profiler: str, rate: int, tmp: str, tag: str) -> dict:
    trace = os.path.join(tmp, f"{tag}.msgpack")
    dump = os.path.join(tmp, f"{tag}.stackprof")
    cmd = common.taskset(common.TARGET_CPU) + [cfg.ruby, os.path.join(common.PROGRAMS, "recursion.rb"), profiler,
                                               workload, str(size), dump]
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=common.gem_env(cfg),
                         preexec_fn=common._die_with_parent)
    res = {"profiler": profiler, "rate": rate}
    try:
        line = p.stdout.readline()
        if not line.startswith("ready"):
            raise RuntimeError(f"recursion.rb {profiler} {workload} did not start (said {line!r})")
        registry = os.path.exists(f"/dev/shm/sdb-{p.pid}")
        if registry != (profiler == "sdb"):  # "none" must not load the gem; "sdb" must have it working
            raise RuntimeError(f"recursion.rb {profiler}: registry {'present' if registry else 'missing'}")

        def go():
            p.stdin.write("go\n")
            p.stdin.flush()
            out = p.stdout.readline()
            if not out.startswith("result "):
                raise RuntimeError(f"recursion.rb {profiler} {workload}: no result (said {out!r})")
            wall, cpu = map(float, out.split()[1:3])
            if workload == "spans":        # the loop's allocations, on the next line
                res["allocated"] = int(p.stdout.readline().split()[1])
            if workload.startswith("fork"):  # the children's pids, on the next line (fork_cost counts
                # the registries they left; the program's own pid makes the spares)
                res["pids"] = [p.pid, *map(int, p.stdout.readline().split()[1:])]
            res["cpu_share"] = cpu / wall  # below ~0.98: something else ran on the target's core
            res["cpu_seconds"] = cpu
            return wall

        if rate:
            with common.sidecar(p.pid, rate, trace) as sc:
                a = common.proc_cpu_ns(sc.pid)
                res["seconds"] = go()
                res["sidecar_cpu_s"] = common.cpu_ns_between(a, common.proc_cpu_ns(sc.pid)) / 1e9  # during the workload only
            res["samples"] = sc.end.get("samples", 0)
            res["rate_hz"] = sc.rate_hz
            os.unlink(trace)
        else:
            res["seconds"] = go()
        p.stdin.close()
        p.wait(timeout=60)
        if profiler.startswith("stackprof"):
            res["samples"] = stackprof_samples(cfg, dump)
            os.unlink(dump)
    finally:
        common.reap(p)
    if "samples" in res and res["samples"] <= 0:
        raise RuntimeError(f"cpu_micro {profiler} {rate or ''}: the profile holds no samples")
    return res


def interleave(cfg, configs, workload: str, size: int, rounds: int, tmp: str) -> dict:
    raw = {name: [] for name, _, _ in configs}
    for i in range(rounds):
        order = configs[i % len(configs):] + configs[:i % len(configs)]
        for name, profiler, rate in order:
            r = one(cfg, workload, size, profiler, rate, tmp, f"{workload}-{i}-{profiler}-{rate}")
            raw[name].append(r)
        base = raw["none"][-1]["seconds"]
        base_cpu = raw["none"][-1]["cpu_seconds"]
        for name, _, _ in configs:
            raw[name][-1]["ratio"] = raw[name][-1]["seconds"] / base
            raw[name][-1]["cpu_ratio"] = raw[name][-1]["cpu_seconds"] / base_cpu
        print(f"  cpu_micro {workload} round {i + 1}/{rounds}: "
              + ", ".join(f"{n} {raw[n][-1]['ratio']:.3f}" for n, _, _ in configs), file=sys.stderr, flush=True)
    return raw


def run(cfg) -> str:
    common.pin_self()
    rounds = 1 if cfg.quick else cfg.rounds or 7
    loop_size = 20_000_000 if cfg.quick else 300_000_000  # iterations: ~0.2 s / ~2.7 s on the test machine
    thread_count = 5_000 if cfg.quick else 40_000
    workloads = os.environ.get("SDB_CPU_MICRO_WORKLOADS", "loop,threads").split(",")
    with tempfile.TemporaryDirectory(prefix="sdb-bench-") as tmp:
        loop = interleave(cfg, LOOP_CONFIGS, "loop", loop_size, rounds, tmp) if "loop" in workloads else None
        threads = interleave(cfg, THREAD_CONFIGS, "threads", thread_count, rounds, tmp) if "threads" in workloads else None
    target = threads_target(cfg)
    rows, loop_rows = [], []
    for name, profiler, rate in (LOOP_CONFIGS if loop else []):
        rs = loop[name]
        row = {"workload": "loop", "config": name, "seconds": summary([r["seconds"] for r in rs]),
               "ratio": summary([r["ratio"] for r in rs]), "rounds": rs}
        verdict = ""
        if name in TARGETS and not cfg.quick:
            verdict = f" (target <= {TARGETS[name]:g}: " + ("met)" if row["ratio"]["median"] <= TARGETS[name] else "MISSED)")
        if "rate_hz" in rs[0]:
            samples = fmt(summary([r["rate_hz"] for r in rs]), 0)
        elif "samples" in rs[0]:  # stackprof: samples in the profile / workload seconds
            samples = fmt(summary([r["samples"] / r["seconds"] for r in rs]), 0)
        else:
            samples = "-"
        sidecar = (fmt(summary([100 * r["sidecar_cpu_s"] / r["seconds"] for r in rs]), 1)
                   if "sidecar_cpu_s" in rs[0] else "-")
        rows.append(row)
        row["cpu_share"] = summary([r["cpu_share"] for r in rs])
        loop_rows.append([name, fmt(row["seconds"], 3), fmt(row["ratio"], 3) + verdict, samples, sidecar,
                          f"{100 * row['cpu_share']['min']:.1f}"])
    thread_rows = []
    for name, _, _ in (THREAD_CONFIGS if threads else []):
        rs = threads[name]
        us = summary([1e6 * r["seconds"] / thread_count for r in rs])
        cpu_us = summary([1e6 * r["cpu_seconds"] / thread_count for r in rs])
        row = {"workload": "threads", "config": name, "us_per_thread": us, "ratio": summary([r["ratio"] for r in rs]),
               "cpu_us_per_thread": cpu_us, "cpu_ratio": summary([r["cpu_ratio"] for r in rs]),
               "cpu_share": summary([r["cpu_share"] for r in rs]), "rounds": rs}
        rows.append(row)
        verdict = ""
        if name == "gem" and not cfg.quick:
            verdict = f" (target <= {target:g}: " + ("met)" if row["ratio"]["median"] <= target else "MISSED)")
        thread_rows.append([name, fmt(us, 2), fmt(row["ratio"], 3) + verdict, fmt(cpu_us, 2), fmt(row["cpu_ratio"], 3)])
    t1 = common.markdown_table(["configuration", "wall s", "ratio to none", "ticks or samples/s achieved", "sidecar CPU % of a core",
                                "target's CPU / wall %, worst round"], loop_rows)
    t2 = common.markdown_table(["configuration", "µs per Thread.new {}.join", "ratio to none",
                                "CPU µs per thread (the process's CPU time)", "CPU ratio to none"], thread_rows)
    params = {"rounds": rounds, "depth": 150, "loop_iterations": loop_size, "threads": thread_count,
              "configs": [c[0] for c in LOOP_CONFIGS]}
    common.write_result(cfg, NAME, params, rows, t1 + "\n\n" + t2)
    pin = common.machine(cfg)["pinning"]
    return (f"### cpu_micro: 150-frame recursion around a tight loop (median of {rounds} rounds, (min-max); {pin})\n\n"
            f"{t1}\n\nThe last column: the target's own CPU time / its wall time; below ~98 % something else ran on its "
            f"core during that round.\n\n### cpu_micro: Thread.new cost, {thread_count} threads (median of {rounds} rounds)\n\n{t2}\n")
