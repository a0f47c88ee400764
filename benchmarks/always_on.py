"""always_on: sdb left on (issue #18): the bundled Rails app (benchmarks/rails_app, puma single mode, 5
threads) under wrk's mix for MINUTES (30), recorded by `attach --rate 1000 --rotate 5m` (quick: 1
minute, `--rotate 20s`).

- The sidecar's memory: its RSS (VmRSS) every 10 s; flat when the median of the last 10 minutes is
  within 5 % of the median of the first 10 after a warm-up of two rotations, 10 minutes (quick: the
  last 20 s against the 20 s after a 10 s warm-up). The sampler's tables grow to hold one file's
  distinct stacks and keep that capacity when the next file starts them over: the first files set
  the sidecar's size.
- The trace's size: bytes per sample of the files written (format 3: zstd), against the same records
  as plain msgpack (what format 2 wrote: each file decompressed), in the same run. Target: at most 6
  bytes a sample (the demo's recording took 26 with format 2)."""
from __future__ import annotations

import glob
import os
import statistics
import subprocess
import tempfile
import time

import common
import rails_overhead

NAME = "always_on"
TARGET_BYTES = 6.0
TARGET_FLAT = 0.05
APP = rails_overhead.APP


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def run(cfg) -> str:
    common.pin_self()
    minutes = 1.0 if cfg.quick else float(os.environ.get("SDB_ALWAYS_ON_MINUTES", "30"))
    rotate = "20s" if cfg.quick else "5m"
    # warm-up: two rotations (the sampler's tables grow to hold one file's distinct stacks, then
    # keep that capacity: the first files set the sidecar's size)
    warm_s, window_s = (10.0, 20.0) if cfg.quick else (600.0, 600.0)
    from sdb_trace import load_tables, plain_bytes
    with tempfile.TemporaryDirectory(prefix="sdb-always-on-") as tmp:
        port = rails_overhead.free_port()
        log = os.path.join(tmp, "puma.log")
        env = common.gem_env(cfg, APP_PROFILER="sdb", APP_DB=os.path.join(tmp, "app.sqlite3"), PORT=port,
                             APP_THREADS=rails_overhead.THREADS)
        cmd = common.taskset(common.TARGET_CPU) + [cfg.ruby, "-S", "puma", "-C", os.path.join(APP, "config", "puma.rb")]
        with open(log, "w") as logf:
            server = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                      cwd=APP, preexec_fn=common._die_with_parent)
        load = sidecar = None
        rss = []
        try:
            rails_overhead.wait_up(port, server, log)
            seconds = minutes * 60
            load = subprocess.Popen(common.taskset(common.SAMPLER_CPU) + [
                "wrk", "-t1", f"-c{rails_overhead.THREADS}", f"-d{seconds + 30:.0f}s", "--timeout", "30s",
                "-s", rails_overhead.WRK_SCRIPT, f"http://127.0.0.1:{port}"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=common._die_with_parent)
            time.sleep(2)
            out = os.path.join(tmp, "trace.msgpack")
            sidecar = subprocess.Popen(common.taskset(common.SAMPLER_CPU) + [
                os.path.join(common.BIN, "sdb-sidecar"), "attach", "--pid", str(server.pid), "--rate", "1000",
                "-o", out, "-q", "--rotate", rotate, "--keep", "1000", "--duration", f"{seconds:.0f}"],
                stderr=subprocess.PIPE, text=True, preexec_fn=common._die_with_parent)
            t0 = time.monotonic()
            while sidecar.poll() is None:
                try:
                    rss.append((time.monotonic() - t0, rss_kib(sidecar.pid)))
                except OSError:
                    break
                time.sleep(10 if not cfg.quick else 2)
            err = sidecar.stderr.read()
            if sidecar.wait() != 0:
                raise RuntimeError(f"sdb-sidecar exited with {sidecar.returncode}: {err.strip()}")
        finally:
            for p in (load, sidecar):
                if p is not None and p.poll() is None:
                    p.kill()
                    p.wait()
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
            common.reap(server)
        files = sorted(glob.glob(os.path.join(tmp, "trace.*.msgpack")))
        samples = sum(load_tables(f).sample_count for f in files)
        size = sum(os.path.getsize(f) for f in files)
        plain = sum(len(plain_bytes(f)) for f in files)
    first = [k for t, k in rss if warm_s <= t < warm_s + window_s]
    last = [k for t, k in rss if t >= rss[-1][0] - window_s] if rss else []
    f_med, l_med = statistics.median(first), statistics.median(last)
    drift = (l_med - f_med) / f_med
    per, per_plain = size / samples, plain / samples
    rows = [["files", f"{len(files)} ({rotate} each)"], ["samples", f"{samples:,}"],
            ["bytes a sample, format 3 (zstd)", f"{per:.2f} (target <= {TARGET_BYTES:g}: "
             f"{'met' if per <= TARGET_BYTES else 'MISSED'})"],
            ["bytes a sample, the same records plain (format 2)", f"{per_plain:.2f}"],
            ["sidecar RSS, median of the first window after warm-up", f"{f_med / 1024:.1f} MiB"],
            ["sidecar RSS, median of the last window", f"{l_med / 1024:.1f} MiB"],
            ["drift", f"{100 * drift:+.1f} % (target within {100 * TARGET_FLAT:g} %: "
             f"{'met' if abs(drift) <= TARGET_FLAT else 'MISSED'})"],
            ["sidecar RSS min-max over the recording", f"{min(k for _, k in rss) / 1024:.1f}-"
                                                       f"{max(k for _, k in rss) / 1024:.1f} MiB"]]
    table = common.markdown_table(["measure", "value"], rows)
    common.write_result(cfg, NAME, {"minutes": minutes, "rotate": rotate, "rate_hz": 1000},
                        [{"rss_kib": rss, "samples": samples, "bytes": size, "plain_bytes": plain, "files": len(files)}],
                        table)
    return (f"### always_on: the Rails app under wrk, `attach --rate 1000 --rotate {rotate}` for {minutes:g} min "
            f"({common.machine(cfg)['pinning']})\n\n{table}\n")
