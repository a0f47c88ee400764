"""rails_overhead: what each profiler costs a Rails app under load (benchmarks/rails_app, puma).

Every run boots a fresh server (Debian's Rails 6.1 + puma, single mode, 5 threads, a fresh SQLite
file) pinned to the target core, then loads it with wrk pinned to the other core: one wrk thread,
5 connections (one per puma thread), each cycling through the five endpoints (CPU-bound view, DB
read, JSON API, DB write, 5 ms IO wait; rails_app/wrk/mix.lua). The server is saturated (always a
request waiting), so a profiler's cost shows as fewer requests/s and longer latencies.
Configurations:
  none            the app without any profiler: the sdb gem is not loaded (checked: no registry)
  gem             `require "sdb"` in config/boot.rb, no sidecar attached
  sdb 1 kHz       the same, sdb-sidecar attached at 1000 Hz (pinned to the wrk core)
  sdb 10 kHz      the same at 10000 Hz
  stackprof wall  StackProf.start(mode: :wall, interval: 1000, raw: false) at boot, dump saved at exit
  stackprof cpu   the same in :cpu mode
A run: boot, warm up (wrk for WARMUP s; the sidecar starts before it and records through the end),
measure (wrk --latency for DURATION s), stop (SIGTERM: stackprof writes its dump). Every
configuration runs once per round, the order rotated each round; ratios are to the same round's
baseline, then the median over rounds. CPU: the server's and the sidecar's on-CPU time during the
measurement (per-thread /proc schedstat, ns)."""
from __future__ import annotations

import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import common
import sidecar_cpu
from common import fmt, summary

NAME = "rails_overhead"
APP = os.path.join(common.ROOT, "benchmarks", "rails_app")
WRK_SCRIPT = os.path.join(APP, "wrk", "mix.lua")
THREADS = 5
CONFIGS = [  # name, APP_PROFILER, sidecar rate (0: none)
    ("none", "none", 0), ("gem", "sdb", 0), ("sdb 1 kHz", "sdb", 1000), ("sdb 10 kHz", "sdb", 10000),
    ("stackprof wall 1 ms", "stackprof-wall", 0), ("stackprof cpu 1 ms", "stackprof-cpu", 0)]
# targets: (throughput ratio >= , p99 ratio <=); sidecar CPU at 1 kHz <= 3 % of one core
TARGETS = {"gem": (0.99, 1.01), "sdb 1 kHz": (0.99, 1.01), "sdb 10 kHz": (0.97, 1.03)}
SIDECAR_TARGET_PCT = 3.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_up(port: int, server: subprocess.Popen, log: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/up", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            with open(log, errors="replace") as f:
                tail = f.read()[-2000:]
            raise RuntimeError(f"rails_app did not come up on port {port} (exit {server.poll()}): {tail}")
        time.sleep(0.1)


def wrk(port: int, seconds: float, connections: int = THREADS) -> dict:
    cmd = common.taskset(common.SAMPLER_CPU) + ["wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s", "--timeout", "30s", "--latency",
                                                "-s", WRK_SCRIPT, f"http://127.0.0.1:{port}"]
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)  # only wrk is reaped in between
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60)
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("WRK_JSON ")), None)
    if r.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed ({r.returncode}): {r.stderr.strip() or r.stdout.strip()}")
    res = json.loads(line.split(" ", 1)[1])
    res["cpu_s"] = ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime
    bad = sum(res["errors"].values())
    if bad:
        raise RuntimeError(f"wrk: {bad} failed requests ({res['errors']})")
    return res


def stackprof_samples(cfg, path: str) -> int:
    r = subprocess.run([cfg.ruby, "-e", "print Marshal.load(File.binread(ARGV[0]))[:samples]", path],
                       capture_output=True, text=True, env=common.gem_env(cfg))
    return int(r.stdout) if r.returncode == 0 and r.stdout.strip().isdigit() else -1


def mapped(pid: int, name: str) -> bool:
    with open(f"/proc/{pid}/maps") as f:
        return name in f.read()


def one(cfg, name: str, profiler: str, rate: int, warmup: float, duration: float, tmp: str, tag: str) -> dict:
    port = free_port()
    log = os.path.join(tmp, f"{tag}.log")
    dump = os.path.join(tmp, f"{tag}.stackprof")
    trace = os.path.join(tmp, f"{tag}.msgpack")
    env = common.gem_env(cfg, APP_PROFILER=profiler, APP_DB=os.path.join(tmp, f"{tag}.sqlite3"), PORT=port,
                         APP_THREADS=THREADS, STACKPROF_OUT=dump)
    cmd = common.taskset(common.TARGET_CPU) + [cfg.ruby, "-S", "puma", "-C", os.path.join(APP, "config", "puma.rb")]
    with open(log, "w") as logf:
        server = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                  cwd=APP, preexec_fn=common._die_with_parent)
    res = {"config": name}
    try:
        wait_up(port, server, log)
        run_one(cfg, name, profiler, rate, warmup, duration, server, port, trace, res)
    except RuntimeError as e:
        with open(log, errors="replace") as f:
            tail = f.read()[-1500:].strip()
        raise RuntimeError(f"{name}: {e}" + (f"; the app's log ends: {tail}" if tail else "")) from None
    finally:
        if server.poll() is None:
            server.terminate()  # SIGTERM: puma stops gracefully, stackprof's at_exit writes the dump
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        common.reap(server)
    if profiler.startswith("stackprof"):
        res["samples"] = stackprof_samples(cfg, dump) if os.path.exists(dump) else -1
    if "samples" in res and res["samples"] <= 0:
        raise RuntimeError(f"{name}: the profile holds no samples")
    # the last round's profiles stay, for a look (run.py --profiles, default out/bench/rails_overhead/)
    profiles = os.path.join(getattr(cfg, "profiles", os.path.join(common.ROOT, "out", "bench")), NAME)
    os.makedirs(profiles, exist_ok=True)
    for path, keep in ((trace, rate), (dump, profiler.startswith("stackprof"))):
        if keep and os.path.exists(path):
            res["profile"] = os.path.join(profiles, name.replace(" ", "-") + os.path.splitext(path)[1])
            shutil.move(path, res["profile"])
    return res


def run_one(cfg, name, profiler, rate, warmup, duration, server, port, trace, res) -> None:
    """Check the configuration, warm up, measure; fills res."""
    # each configuration is what it says: the gem loaded only where asked, stackprof only where asked
    has_gem = os.path.exists(f"/dev/shm/sdb-{server.pid}") and mapped(server.pid, "sdb_ext.so")
    if has_gem != (profiler == "sdb"):
        raise RuntimeError(f"the sdb gem is {'loaded' if has_gem else 'not working'}")
    if mapped(server.pid, "stackprof.so") != profiler.startswith("stackprof"):
        raise RuntimeError(f"stackprof {'loaded' if not profiler.startswith('stackprof') else 'missing'}")

    def measure(sidecar_pid=None):
        wrk(port, warmup)
        sc_a = common.proc_cpu_ns(sidecar_pid) if sidecar_pid else {}
        a, t0 = common.proc_cpu_ns(server.pid), time.monotonic()
        w = wrk(port, duration)
        b, t1 = common.proc_cpu_ns(server.pid), time.monotonic()
        sc_b = common.proc_cpu_ns(sidecar_pid) if sidecar_pid else {}
        server_ns = common.cpu_ns_between(a, b)
        res.update(requests=w["requests"], rps=w["requests"] / (w["duration_us"] / 1e6),
                   p50_ms=w["latency_us"]["p50"] / 1e3, p90_ms=w["latency_us"]["p90"] / 1e3,
                   p99_ms=w["latency_us"]["p99"] / 1e3, mean_ms=w["latency_us"]["mean"] / 1e3,
                   server_cpu_pct=100.0 * server_ns / ((t1 - t0) * 1e9), wrk_cpu_pct=100.0 * w["cpu_s"] / (t1 - t0),
                   server_cpu_ms_per_req=server_ns / 1e6 / max(1, w["requests"]))
        if sidecar_pid:  # the sidecar's main thread is its Python side (drain, trace); others sample
            win = (t1 - t0) * 1e9
            py = sc_b.get(sidecar_pid, 0) - sc_a.get(sidecar_pid, 0)
            other = common.cpu_ns_between(sc_a, sc_b) - py
            res.update(sidecar_cpu_pct=100.0 * (py + other) / win, sidecar_python_pct=100.0 * py / win,
                       sidecar_sampler_pct=100.0 * other / win)

    if rate:
        with common.sidecar(server.pid, rate, trace) as sc:
            measure(sc.pid)
        ts = sidecar_cpu.trace_stats(trace)
        res.update(samples=sc.end.get("samples", 0), rate_hz=sc.rate_hz, sidecar_total_cpu_s=sc.rusage_s,
                   threads=sc.end.get("threads", 0), frames_per_sample=ts["frames_per_sample"],
                   torn=sc.end.get("torn", 0), late=sc.end.get("late", 0) + sc.end.get("missed", 0))
    else:
        measure()


def run(cfg) -> str:
    common.pin_self()
    if shutil.which("wrk") is None:
        raise RuntimeError("rails_overhead needs wrk (scripts/setup-machine installs it)")
    check = subprocess.run([cfg.ruby, "-e", 'require "rails"; require "puma"; require "sqlite3"; require "stackprof"'],
                           capture_output=True, text=True, env=common.gem_env(cfg))
    if check.returncode != 0:
        raise RuntimeError(f"rails_overhead needs a Ruby that loads Debian's Rails 6.1, puma, sqlite3 and stackprof "
                           f"(Debian's /usr/bin/ruby); {cfg.ruby} cannot: {check.stderr.strip().splitlines()[0]}")
    rounds = 1 if cfg.quick else cfg.rounds or 5
    warmup, duration = (2.0, 4.0) if cfg.quick else (8.0, 20.0)
    raw = {n: [] for n, _, _ in CONFIGS}
    with tempfile.TemporaryDirectory(prefix="sdb-rails-") as tmp:
        for i in range(rounds):
            k = i % len(CONFIGS)
            for name, profiler, rate in CONFIGS[k:] + CONFIGS[:k]:
                raw[name].append(one(cfg, name, profiler, rate, warmup, duration, tmp, f"r{i}-{profiler}-{rate}"))
            base = raw["none"][-1]
            for name, _, _ in CONFIGS:
                r = raw[name][-1]
                for key in ("rps", "p50_ms", "p99_ms", "server_cpu_ms_per_req"):
                    r[key + "_ratio"] = r[key] / base[key]
            print(f"  rails_overhead round {i + 1}/{rounds}: " + ", ".join(
                f"{n} {raw[n][-1]['rps']:.1f} req/s (x{raw[n][-1]['rps_ratio']:.3f}) p99 {raw[n][-1]['p99_ms']:.0f} ms"
                for n, _, _ in CONFIGS), file=sys.stderr, flush=True)
    rows, table_rows = [], []
    for name, profiler, rate in CONFIGS:
        rs = raw[name]
        row = {"config": name, "rounds": rs}
        for key in ("rps", "rps_ratio", "p50_ms", "p50_ms_ratio", "p99_ms", "p99_ms_ratio", "p90_ms",
                    "server_cpu_ms_per_req", "server_cpu_ms_per_req_ratio", "server_cpu_pct", "wrk_cpu_pct"):
            row[key] = summary([r[key] for r in rs])
        for key in ("sidecar_cpu_pct", "sidecar_sampler_pct", "sidecar_python_pct", "rate_hz", "threads",
                    "frames_per_sample"):
            if key in rs[0]:
                row[key] = summary([r[key] for r in rs])
        row["samples"] = summary([r["samples"] for r in rs]) if "samples" in rs[0] else None
        rows.append(row)
        verdict = ""
        if name in TARGETS and not cfg.quick:
            lo, hi = TARGETS[name]
            ok = row["rps_ratio"]["median"] >= lo and row["p99_ms_ratio"]["median"] <= hi
            verdict = f" ({'met' if ok else 'MISSED'})"
        profiler_cpu = "-"
        if "sidecar_cpu_pct" in row:
            profiler_cpu = (f"{fmt(row['sidecar_cpu_pct'])} (sidecar; sampler {row['sidecar_sampler_pct']['median']:.1f}, "
                            f"python {row['sidecar_python_pct']['median']:.1f})")
            if rate == 1000 and not cfg.quick:
                profiler_cpu += " (target <= 3: " + ("met)" if row["sidecar_cpu_pct"]["median"] <= SIDECAR_TARGET_PCT else "MISSED)")
        elif profiler.startswith("stackprof"):
            profiler_cpu = "in the server (see CPU/req)"
        achieved = (f"{fmt(row['rate_hz'], 0)} x {row['threads']['median']:.0f} threads" if "rate_hz" in row else
                    f"{row['samples']['median'] / (warmup + duration):.0f}*" if row["samples"] else "-")
        table_rows.append([name, fmt(row["rps"], 1), fmt(row["rps_ratio"], 3) + verdict, fmt(row["p50_ms"], 1),
                           fmt(row["p50_ms_ratio"], 3), fmt(row["p99_ms"], 1), fmt(row["p99_ms_ratio"], 3),
                           fmt(row["server_cpu_ms_per_req"], 2), fmt(row["server_cpu_ms_per_req_ratio"], 3),
                           profiler_cpu, achieved])
    table = common.markdown_table(
        ["configuration", "req/s", "req/s ratio", "p50 ms", "p50 ratio", "p99 ms", "p99 ratio", "server CPU ms/req",
         "CPU/req ratio", "profiler CPU % of a core", "ticks/s achieved"], table_rows)
    details = common.markdown_table(
        ["configuration", "server CPU % of its core", "wrk CPU % (sidecar's core)", "threads sampled",
         "frames/sample", "torn/late ticks"],
        [[row["config"], fmt(row["server_cpu_pct"], 1), fmt(row["wrk_cpu_pct"], 1),
          f"{row['threads']['median']:.0f}" if "threads" in row else "-",
          fmt(row["frames_per_sample"], 1) if "frames_per_sample" in row else "-",
          (f"{sum(r['torn'] for r in row['rounds'])}/{sum(r['late'] for r in row['rounds'])}"
           if "torn" in row["rounds"][0] else "-")] for row in rows])
    params = {"rounds": rounds, "warmup_s": warmup, "duration_s": duration, "puma_threads": THREADS,
              "wrk": f"wrk -t1 -c{THREADS} -d{duration:g}s --latency -s benchmarks/rails_app/wrk/mix.lua",
              "configs": [c[0] for c in CONFIGS], "targets": {k: list(v) for k, v in TARGETS.items()}}
    common.write_result(cfg, NAME, params, rows, table + "\n\n" + details)
    return (f"### rails_overhead: Rails 6.1 + puma (5 threads), wrk 1 thread x {THREADS} connections, "
            f"{duration:g} s after {warmup:g} s warm-up, median of {rounds} rounds, (min-max); "
            f"{common.machine(cfg)['pinning']}; wrk shares the sidecar's core\n\n{table}\n\n"
            f"ratios: to the same round's no-profiler run, median over rounds. "
            f"* stackprof: samples in its dump / (warm-up + measured) seconds.\n\n{details}\n")
