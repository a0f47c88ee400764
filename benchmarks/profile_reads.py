"""Where a stack sample's time goes: process_vm_readv calls per sample and the cost
of one call by shape (not part of run.py; run it on a quiet machine).

  .venv/bin/python benchmarks/profile_reads.py --gem-home build/gem-home

1. syscalls: `strace -c -f -e trace=process_vm_readv` around a tight sample_once()
   loop over an 8-thread parked target of depth D: calls per sample.
2. shapes: process_vm_readv from this process into the same target, timed with
   ctypes: one 8-byte read, n iovecs of 24 bytes (what the sampler does for the
   ep[-2..0] of each frame), and one contiguous read of the same total size.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

TIGHT = """
import sys; sys.path[:0] = [{sidecar!r}]
from sdb_sidecar.target.target import open_target; from sdb_sidecar.sampler import _sampler
pid, n = {pid}, {n}
t = open_target(pid); s = _sampler.Sampler(t.registry, pid, 1000, 2048)
for i in range(n):
    s.sample_once()
    if i % 50 == 0: s.drain()
print("samples", s.stats()["samples"])
"""


class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def syscalls_per_sample(pid: int, n: int = 1000) -> float:
    code = TIGHT.format(sidecar=os.path.join(common.ROOT, "sidecar"), pid=pid, n=n)
    r = subprocess.run(["strace", "-c", "-f", "-e", "trace=process_vm_readv", sys.executable, "-c", code],
                       capture_output=True, text=True)
    samples = int(re.search(r"samples (\d+)", r.stdout).group(1))
    line = next(ln for ln in r.stderr.splitlines() if ln.endswith(" process_vm_readv"))
    calls = int(line.split()[3])    # % time, seconds, usecs/call, calls, [errors], syscall
    return calls / samples


def shapes(pid: int, reps: int = 2000) -> list:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.process_vm_readv.argtypes = [ctypes.c_int, ctypes.POINTER(iovec), ctypes.c_ulong,
                                      ctypes.POINTER(iovec), ctypes.c_ulong, ctypes.c_ulong]
    region = 0
    with open(f"/proc/{pid}/maps") as f:   # the target's largest private rw anonymous mapping
        best = 0
        for line in f:
            fs = line.split()
            lo, hi = (int(x, 16) for x in fs[0].split("-"))
            if fs[1].startswith("rw") and len(fs) == 5 and hi - lo > best:
                region, best = lo, hi - lo
    buf = ctypes.create_string_buffer(1 << 20)

    def us(n, size, stride):
        loc, rem = (iovec * n)(), (iovec * n)()
        for i in range(n):
            loc[i].base, loc[i].len = ctypes.addressof(buf) + i * size, size
            rem[i].base, rem[i].len = region + i * stride, size
        best = float("inf")
        for _ in range(5):                 # best of 5 batches: the floor, not the noise
            t0 = time.perf_counter_ns()
            for _ in range(reps):
                got = libc.process_vm_readv(pid, loc, n, rem, n, 0)
            best = min(best, (time.perf_counter_ns() - t0) / reps / 1e3)
        if got != n * size:
            raise OSError(ctypes.get_errno(), "process_vm_readv")
        return best

    t0 = time.perf_counter_ns()
    for _ in range(reps):
        libc.getppid()
    rows = [["getppid() (syscall + ctypes floor)", f"{(time.perf_counter_ns() - t0) / reps / 1e3:.2f}"],
            ["process_vm_readv, 1 iovec of 8 B", f"{us(1, 8, 0):.2f}"]]
    for n in (10, 50, 200):
        rows.append([f"process_vm_readv, {n} iovecs of 24 B (one per frame)", f"{us(n, 24, 64):.2f}"])
        rows.append([f"process_vm_readv, 1 iovec of {n * 24} B (same bytes, contiguous)", f"{us(1, n * 24, 0):.2f}"])
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ruby", default="/usr/bin/ruby")
    ap.add_argument("--gem-home", required=True)
    cfg = ap.parse_args()
    cfg.gem_home, cfg.quick = os.path.abspath(cfg.gem_home), False
    common.pin_self()
    rows = []
    for depth in (10, 50, 200):
        with common.ruby_target(cfg, "stacks.rb", 8, depth, "park") as p:
            rows.append([f"depth {depth}", f"{syscalls_per_sample(p.pid):.2f}"])
    print(common.markdown_table(["8 parked threads", "process_vm_readv calls per sample"], rows) + "\n")
    with common.ruby_target(cfg, "stacks.rb", 8, 50, "park") as p:
        print(common.markdown_table(["call (best of 5 x 2000)", "us per call"], shapes(p.pid)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
