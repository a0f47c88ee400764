"""tick_instructions: what one tick of the sampler spends, in counts a loaded machine does not move:
instructions (valgrind's callgrind, inside Sampler.tick and all it calls: user-space only) and
system calls (strace -c), per tick and per sample.

Target: programs/stacks.rb, 8 threads in mixed mode at a depth of 30..50 (sidecar_cpu's target), pinned
to another core. The sampler is made as `attach` makes it (session.new_sampler) and ticked at the
rate asked, paced by sleeps (sample_once), drained every 100 ms; no eBPF (so on Ruby 3.1 procfs says
which threads ran, and there are no in-context reads): this counts the sampler's own work. Each
configuration runs twice: once under callgrind (--toggle-collect on Sampler.tick: instructions in
ticks only), once under strace -f -c (system calls of the whole process, divided by its ticks).

  .venv/bin/python benchmarks/tick_instructions.py [--python TREE/.venv/bin/python] [--gem-home DIR]
      [--ruby /usr/bin/ruby] [--rate 1000] [--rate 100] [--ticks 3000]

--python: the sidecar build to measure (another tree's venv: compare two builds on one target
program). Prints one Markdown row per rate."""
from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def inner(pid: int, rate: float, ticks: int) -> None:
    """Runs in the measured build's Python: tick `ticks` times at `rate`, print ticks and samples."""
    try:
        from sdb_sidecar.recording.options import Options
        from sdb_sidecar.recording.session import new_sampler
        from sdb_sidecar.target.target import open_target
    except ImportError:         # a build from before the layer folders (ed9dcc2)
        from sdb_sidecar.options import Options
        from sdb_sidecar.session import new_sampler
        from sdb_sidecar.target import open_target
    s = new_sampler(open_target(pid), Options(rate_hz=rate))
    period = 1.0 / rate
    samples, drained_at = 0, time.monotonic()
    nxt = time.monotonic()
    for _ in range(ticks):
        nxt += period
        s.sample_once()
        now = time.monotonic()
        if now - drained_at >= 0.1:
            d = s.drain(encode_samples=False)
            samples += len(d["sample_t"])
            drained_at = now
        if nxt > now:
            time.sleep(nxt - now)
        else:
            nxt = now
    samples += len(s.drain(encode_samples=False)["sample_t"])
    st = s.stats()
    print(f"RESULT ticks={st['ticks']} samples={samples} torn={st['torn']} reused={st['reused']}", flush=True)


def parse_result(out: str) -> dict:
    for line in out.splitlines():
        if line.startswith("RESULT "):
            return {k: int(v) for k, v in (kv.split("=") for kv in line.split()[1:])}
    raise RuntimeError(f"no result in the inner run's output: {out[-2000:]!r}")


def callgrind_ir(path: str) -> int:
    with open(path) as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise RuntimeError(f"no totals in {path}")


def strace_counts(path: str) -> dict:
    counts = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 5 and parts[0][0].isdigit() and parts[-1] not in ("total", "syscall"):
                counts[parts[-1]] = int(parts[3])
    return counts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--ruby", default="/usr/bin/ruby")
    ap.add_argument("--gem-home", default="")
    ap.add_argument("--rate", type=float, action="append")
    ap.add_argument("--ticks", type=int, default=3000)
    ap.add_argument("--inner", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    rates = a.rate or [1000.0, 100.0]
    if a.inner:
        inner(a.inner, rates[0], a.ticks)
        return 0
    sys.path.insert(0, HERE)
    import common
    env = dict(os.environ, GEM_HOME=a.gem_home, GEM_PATH=a.gem_home) if a.gem_home else dict(os.environ)
    target = subprocess.Popen(common.taskset(common.TARGET_CPU) + [a.ruby, os.path.join(HERE, "programs", "stacks.rb"),
                              "8", "30", "mixed"], stdout=subprocess.PIPE, env=env, text=True)
    rows = []
    try:
        if not target.stdout.readline().startswith("ready"):
            raise SystemExit("tick_instructions: stacks.rb did not start")
        while not os.path.exists(f"/dev/shm/sdb-{target.pid}"):
            time.sleep(0.01)
        with tempfile.TemporaryDirectory(prefix="sdb-ticki-") as tmp:
            for rate in rates:
                run = [a.python, os.path.abspath(__file__), "--inner", str(target.pid), "--rate", str(rate),
                       "--ticks", str(a.ticks)]
                cg = os.path.join(tmp, f"cg-{rate:g}.out")
                p = subprocess.run(common.taskset(common.SAMPLER_CPU) + [
                    "valgrind", "--tool=callgrind", "--toggle-collect=*Sampler_tick", f"--callgrind-out-file={cg}"]
                    + run, capture_output=True, text=True)
                res = parse_result(p.stdout)
                ir = sum(callgrind_ir(f) for f in glob.glob(cg + "*"))
                so = os.path.join(tmp, f"st-{rate:g}.txt")
                p = subprocess.run(common.taskset(common.SAMPLER_CPU) + ["strace", "-f", "-c", "-o", so] + run,
                                   capture_output=True, text=True)
                res2 = parse_result(p.stdout)
                sc = strace_counts(so)
                t2 = max(res2["ticks"], 1)
                rows.append((rate, res, ir, res2, sc, t2))
                print(f"  {rate:g} Hz: {ir / max(res['ticks'], 1):,.0f} instructions/tick, "
                      f"{ir / max(res['samples'], 1):,.0f}/sample; syscalls/tick "
                      f"{sum(sc.values()) / t2:.2f}", file=sys.stderr, flush=True)
    finally:
        target.kill()
        target.wait()
        try:
            os.unlink(f"/dev/shm/sdb-{target.pid}")
        except FileNotFoundError:
            pass
    print("| rate Hz | ticks | samples/tick | reused/tick | instructions/tick | instructions/sample | "
          "process_vm_readv/tick | pread64/tick | other syscalls/tick |")
    print("|---|---|---|---|---|---|---|---|---|")
    for rate, res, ir, res2, sc, t2 in rows:
        t = max(res["ticks"], 1)
        pv, pr = sc.get("process_vm_readv", 0), sc.get("pread64", 0)
        other = sum(sc.values()) - pv - pr
        print(f"| {rate:g} | {res['ticks']} | {res['samples'] / t:.2f} | {res['reused'] / t:.2f} | {ir / t:,.0f} | "
              f"{ir / max(res['samples'], 1):,.0f} | {pv / t2:.2f} | {pr / t2:.2f} | {other / t2:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
