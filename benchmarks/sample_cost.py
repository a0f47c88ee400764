"""sample_cost: time to read one thread's stack, for stacks of 10, 50 and 200 frames.

Target: programs/stacks.rb, 8 threads each D frames deep, parked in sleep (park)
or looping over small methods at the leaf (busy: the top frames change all the time).
Two ways, in the same process, on the same target, with the Python API:
  paced  Sampler.run at 1000 Hz (as in production), drained every 100 ms;
  tight  sample_once() back to back, no sleep (raw throughput).
Cost per sample = read_ns_total / samples (time inside ticks, all threads,
retries of torn reads included). For tight, wall time per sample too.
As `sdb-sidecar attach` does, the sampler learns which threads ran from the gem (Ruby >= 3.2) or, on
3.1, from the kernel view where eBPF can be used (procfs otherwise): a thread that did not run since
its last read costs no read (a parked thread; a busy one waiting for the GVL off its CPU).
Configurations are interleaved: every round runs every (mode, depth) once."""
from __future__ import annotations

import statistics
import sys
import threading
import time

import common
from common import fmt, summary

NAME = "sample_cost"
TARGET_US_50 = 3.0


class Meter:
    """Drains a sampler and tracks frames per sample (the real stack sizes read)."""

    def __init__(self, sampler):
        self.s = sampler
        self.lengths = {}
        self.reset()

    def reset(self):
        self.frames = 0
        self.samples = 0

    def drain(self):
        d = self.s.drain()
        for i, st in enumerate(d["stacks"]):
            self.lengths[d["first_stack"] + i] = len(st)
        for sid in d["sample_stack"]:
            self.frames += self.lengths.get(sid, 0)
            self.samples += 1

    def frames_per_sample(self) -> float:
        return self.frames / self.samples if self.samples else 0.0


def delta(a: dict, b: dict) -> dict:
    return {k: b[k] - a[k] for k in ("samples", "read_ns_total", "torn", "retried", "ticks")}


def paced(sampler, meter, rate, seconds) -> dict:
    a = sampler.stats()
    sampler.start(seconds)      # the native tick loop; wait() joins it without the GIL
    th = threading.Thread(target=sampler.wait)
    th.start()
    while th.is_alive():
        th.join(0.1)
        meter.drain()
    d = delta(a, sampler.stats())
    d["wall_s"] = seconds
    return d


def tight(sampler, meter, seconds) -> dict:
    a = sampler.stats()
    t0 = time.perf_counter()
    end = t0 + seconds
    while time.perf_counter() < end:
        for _ in range(50):
            sampler.sample_once()
        meter.drain()
    d = delta(a, sampler.stats())
    d["wall_s"] = time.perf_counter() - t0
    return d


def one(cfg, mode: str, depth: int, threads: int, rate: float, paced_s: float, tight_s: float) -> dict:
    from sdb_sidecar.sampler import _sampler
    from sdb_sidecar.ebpf.bpfload import EbpfUnavailable
    from sdb_sidecar.ebpf.kview import KernelView
    from sdb_sidecar.recording.session import threads_from
    from sdb_sidecar.target.target import open_target
    with common.ruby_target(cfg, "stacks.rb", threads, depth, mode) as p:
        t = open_target(p.pid)
        s = _sampler.Sampler(t.registry, p.pid, rate, 2048)
        kv = None
        if s.uses_thread_status:        # Ruby 3.1: the kernel view, as a recording would use it
            try:
                kv = KernelView()
                kv.start()
                kv.add(p.pid)
                s.use_kernel_view(kv.address, kv.slots)
            except EbpfUnavailable:
                kv = None
        source = threads_from(s, kv)
        m = Meter(s)
        for _ in range(20):            # first reads intern frames and read ISeq headers: not steady state
            s.sample_once()
        m.drain()
        m.reset()
        pr = paced(s, m, rate, paced_s)
        frames = m.frames_per_sample()
        tr = tight(s, m, tight_s)
        if kv is not None:
            s.use_kernel_view(0, 0)
            kv.close()
    us = lambda d: d["read_ns_total"] / d["samples"] / 1e3 if d["samples"] else float("nan")
    return {"paced_us": us(pr), "tight_us": us(tr), "tight_wall_us": tr["wall_s"] * 1e6 / max(1, tr["samples"]),
            "frames": frames, "paced_samples": pr["samples"], "paced_ticks": pr["ticks"],
            "rate_hz": pr["ticks"] / paced_s, "torn": pr["torn"] + tr["torn"], "retried": pr["retried"] + tr["retried"],
            "tight_samples": tr["samples"], "threads_per_tick": pr["samples"] / max(1, pr["ticks"]),
            "threads_from": source}


def run(cfg) -> str:
    common.pin_self()
    depths = [10, 50, 200]
    modes = ["park", "busy"]
    threads, rate = 8, 1000.0
    rounds = 1 if cfg.quick else cfg.rounds or 5
    paced_s, tight_s = (0.5, 0.2) if cfg.quick else (2.0, 0.5)
    raw = {(m, d): [] for m in modes for d in depths}
    for r in range(rounds):
        for m in modes:
            for d in depths:
                res = one(cfg, m, d, threads, rate, paced_s, tight_s)
                raw[(m, d)].append(res)
                print(f"  sample_cost round {r + 1}/{rounds} {m:4} D={d:3}: paced {res['paced_us']:.2f} us, "
                      f"tight {res['tight_us']:.2f} us/sample ({res['frames']:.0f} frames)", file=sys.stderr, flush=True)
    rows, table_rows = [], []
    for m in modes:
        for d in depths:
            rs = raw[(m, d)]
            row = {"mode": m, "depth": d, "frames_per_sample": statistics.median(x["frames"] for x in rs)}
            for k in ("paced_us", "tight_us", "tight_wall_us", "rate_hz"):
                row[k] = summary([x[k] for x in rs])
            row["paced_samples"] = sum(x["paced_samples"] for x in rs)
            row["tight_samples"] = sum(x["tight_samples"] for x in rs)
            row["torn"] = sum(x["torn"] for x in rs)
            row["retried"] = sum(x["retried"] for x in rs)
            row["rounds"] = rs
            rows.append(row)
            ok = "" if d != 50 else (" (target <= 3: met)" if row["paced_us"]["median"] <= TARGET_US_50
                                     else " (target <= 3: MISSED)")
            table_rows.append([m, d, f"{row['frames_per_sample']:.1f}", fmt(row["paced_us"]) + ok,
                               fmt(row["tight_us"]), fmt(row["tight_wall_us"]), fmt(row["rate_hz"], 0),
                               f"{row['retried']}/{row['torn']}",
                               f"{row['paced_samples'] + row['tight_samples']}", rs[-1]["threads_from"]])
    table = common.markdown_table(
        ["leaf", "depth", "frames/sample", "paced 1 kHz: us/sample", "tight: us/sample (in tick)",
         "tight: wall us/sample", "paced rate Hz", "retried/torn", "samples", "threads from"], table_rows)
    params = {"threads": threads, "rate_hz": rate, "rounds": rounds, "paced_s": paced_s, "tight_s": tight_s,
              "depths": depths, "modes": modes, "target_us_per_50_frame_sample": TARGET_US_50}
    common.write_result(cfg, NAME, params, rows, table)
    return (f"### sample_cost ({threads} threads, median of {rounds} rounds, (min-max); "
            f"{common.machine(cfg)['pinning']})\n\n{table}\n")
