#!/usr/bin/env python3
"""How many switch-ins of a thread a program on the sched_switch raw tracepoint does not see.

Why (docs/internals.md, "The kernel view (Ruby 3.1)"): on Ruby 3.1 the sampler reuses a thread's
last stack while the kernel view (bpf/thread_switches.c) says the thread was not switched in since.
This measures, against the kernel's own count (schedstat's third field, the number of times the task
ran), how many switch-ins a sched_switch program of the same shape counts, for a spinning thread
pinned to one CPU with hogs beside it (so that it is switched in and out all the time), once with
nothing else going on and once while other sidecars attach and leave (each run of `sdb-sidecar
attach` attaches its own programs to sched_switch and takes them away).

    .venv/bin/python benchmarks/kview_misses.py [--seconds 40]      # as root; ~2 min

Prints one line per condition: switch-ins (schedstat), seen by the program, missed.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "sidecar"))
sys.path.insert(0, "/usr/lib/python3/dist-packages")   # Debian's bcc (python3-bpfcc)

from sdb_sidecar.ebpf.kview import task_offsets  # noqa: E402

CHURNERS = 3        # sidecars attaching and leaving at once, as in a test run

PROGRAM = r"""
BPF_ARRAY(seen, u64, 1);
RAW_TRACEPOINT_PROBE(sched_switch)
{
    u32 k = 0, tid = 0;
    u64 *c;
    if (bpf_probe_read_kernel(&tid, sizeof(tid), (void *)ctx->args[2] + PID_OFFSET) != 0 || tid != TID)
        return 0;
    c = seen.lookup(&k);
    if (c)
        __sync_fetch_and_add(c, 1);
    return 0;
}
"""


def switch_ins(tid: int) -> int:
    with open(f"/proc/{tid}/task/{tid}/schedstat") as f:
        return int(f.read().split()[2])


def measure(seconds: float, churn: bool) -> tuple:
    from bcc import BPF
    spinner = subprocess.Popen(["taskset", "-c", "1", sys.executable, "-c", "while True: pass"])
    hogs = [subprocess.Popen(["taskset", "-c", "1", "sh", "-c", "while :; do :; done"]) for _ in range(4)]
    sleeper = churner = None
    try:
        pid_off, _ = task_offsets()
        bpf = BPF(text=PROGRAM.replace("PID_OFFSET", str(pid_off)).replace("TID", str(spinner.pid)))
        if churn:
            sleeper = subprocess.Popen(["ruby", "-rsdb", "-e", "sleep"])
            time.sleep(1)
            churner = subprocess.Popen(
                ["sh", "-c", " & ".join(
                    f"while :; do {sys.executable} -m sdb_sidecar.cli attach --pid {sleeper.pid} "
                    f"-o /tmp/kview_misses{i}.msgpack --duration 2 -q >/dev/null 2>&1; done"
                    for i in range(CHURNERS)) + "; wait"],
                env={**os.environ, "PYTHONPATH": os.path.join(REPO, "sidecar")}, start_new_session=True)
            time.sleep(3)
        seen = bpf["seen"]
        k = ctypes.c_int(0)
        s0 = seen[k].value             # read orders that can only under-count misses
        p0 = switch_ins(spinner.pid)
        time.sleep(seconds)
        p1 = switch_ins(spinner.pid)
        s1 = seen[k].value
        return p1 - p0, s1 - s0
    finally:
        if churner is not None:
            os.killpg(churner.pid, 9)
            churner.wait()
        for p in [sleeper, spinner, *hogs]:
            if p is not None:
                p.kill()
                p.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=40)
    args = ap.parse_args()
    for churn in (False, True):
        total, seen = measure(args.seconds, churn)
        what = "other sidecars attaching and leaving" if churn else "nothing else attaching"
        print(f"{what}: {total} switch-ins (schedstat), {seen} seen by the program, "
              f"{total - seen} missed (1 in {total // max(total - seen, 1)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
