"""boot_symbolizer: how much the eBPF symbolizer slows a boot that creates many ISeqs.

Target: programs/boot.rb loads 2,000 generated files (a class, 5 methods, a block: 7 ISeqs each) and
evals 50,000 methods one eval at a time (2 ISeqs each: 114,000 ISeqs in all). It times its own boot
(monotonic clock, the boot alone). Four configurations, interleaved round by round:
  none       no sidecar
  remote     `sdb-sidecar attach --no-ebpf` recording at 1 kHz (ISeqs named by remote reads)
  ebpf       `sdb-sidecar attach` recording at 1 kHz with the eBPF symbolizer and its governor at the
             default budget (creation probes paused while ISeqs come faster than 5,000/s)
  ebpf-all   the same with `--ebpf-max-rate 0`: every ISeq probed
The sidecar is attached and recording (its first samples are in the trace, and its eBPF symbolizer
attached) before the boot starts.
Slowdown = boot time / median boot time without sidecar - 1. Target: at most 5% with eBPF (default).
Also reported: eBPF events, pauses, and how many ISeq records of the trace eBPF wrote vs remote reads.
The target runs on one core, the sidecar on another; the generated files are in /dev/shm."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

import common
from common import fmt, summary

NAME = "boot_symbolizer"
TARGET_PCT = 5.0
FILES, METHODS = 2000, 50000

FILE_TEMPLATE = """class BootClass{i}
  def a{i}(x) = x + 1
  def b{i}(x) = x * 2
  def c{i}(x) = [x].map {{ |y| y + {i} }}
  def d{i}; :d; end
  def e{i}; "e"; end
end
"""


def make_files(folder: str, n: int) -> None:
    for i in range(n):
        with open(os.path.join(folder, f"f{i}.rb"), "w") as f:
            f.write(FILE_TEMPLATE.format(i=i))


MODES = {"none": None, "remote": ["--no-ebpf"], "ebpf": [], "ebpf-all": ["--ebpf-max-rate", "0"]}


def samples_in(path: str) -> int:
    from sdb_trace import TraceError, TraceReader
    try:
        with TraceReader(path) as r:
            return sum(len(rec["stack"]) for rec in r.records() if rec["t"] == "samples")
    except (TraceError, OSError, ValueError):
        return 0


def one(cfg, mode: str, folder: str, files: int, methods: int, tmp: str) -> dict:
    out = os.path.join(tmp, f"boot-{mode}.msgpack")
    with common.ruby_target(cfg, "boot.rb", folder, files, methods, stdin=True) as target:
        sc = None
        if MODES[mode] is not None:
            cmd = common.taskset(common.SAMPLER_CPU) + [
                os.path.join(common.BIN, "sdb-sidecar"), "attach", "--pid", str(target.pid), "--rate", "1000",
                "-o", out, "--quiet"] + MODES[mode]
            with open(out + ".stderr", "w") as err:
                sc = subprocess.Popen(cmd, stderr=err, text=True)
            said = lambda: open(out + ".stderr").read()     # noqa: E731
            # (but --no-ebpf) the eBPF symbolizer attached, beside the sampling: as long as its compile takes
            if "--no-ebpf" not in MODES[mode]:
                common.wait_ebpf_attached(sc, out, said)
            deadline = time.monotonic() + 30
            while samples_in(out) == 0:     # and recording
                if sc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"sdb-sidecar did not start recording: {said() if sc.poll() is not None else 'timeout'}")
                time.sleep(0.05)
        target.stdin.write("go\n")
        target.stdin.flush()
        line = target.stdout.readline()
        if not line.startswith("boot_s "):
            raise RuntimeError(f"boot.rb said {line!r}")
        boot_s = float(line.split()[1])
        target.wait(30)
        end, sources = {}, {}
        if sc is not None:
            sc.wait(timeout=60)
            if sc.returncode != 0:
                raise RuntimeError(f"sdb-sidecar exited with {sc.returncode}: {said().strip()}")
            from sdb_trace import TraceReader
            with TraceReader(out) as r:
                for rec in r.records():
                    if rec["t"] == "iseq":
                        sources[rec["source"]] = sources.get(rec["source"], 0) + 1
                end = r.end or {}
            os.unlink(out)
            os.unlink(out + ".stderr")
    ebpf = end.get("ebpf") or {}
    return {"boot_s": boot_s, "ebpf_events": sum((ebpf.get("events") or {}).values()), "lost": ebpf.get("lost", 0),
            "pauses": ebpf.get("pauses", 0), "paused_s": ebpf.get("paused_s", 0.0),
            "named_ebpf": sources.get("ebpf", 0), "named_remote": sources.get("remote", 0),
            "symbol_errors": end.get("symbol_errors", 0), "samples": end.get("samples", 0)}


def run(cfg) -> str:
    common.pin_self()
    files, methods = FILES, METHODS
    rounds = 1 if cfg.quick else cfg.rounds or 7
    modes = list(MODES)
    raw = {m: [] for m in modes}
    # the files live in tmpfs: on disk, memory reclaim sent some boots to the disk for their files
    # (perf showed them waiting in filemap_read), a noise larger than what is measured
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(prefix="sdb-bench-boot-", dir=shm) as tmp:
        folder = os.path.join(tmp, "app")
        os.mkdir(folder)
        make_files(folder, files)
        for i in range(rounds):
            for mode in modes:
                res = one(cfg, mode, folder, files, methods, tmp)
                raw[mode].append(res)
                print(f"  boot_symbolizer round {i + 1}/{rounds} {mode}: {res['boot_s']:.3f} s, "
                      f"{res['ebpf_events']} eBPF events ({res['lost']} lost), {res['pauses']} pauses, ISeqs "
                      f"named by eBPF {res['named_ebpf']}, remotely {res['named_remote']}", file=sys.stderr,
                      flush=True)
    base = summary([r["boot_s"] for r in raw["none"]])["median"]
    rows, table_rows = [], []
    for mode in modes:
        rs = raw[mode]
        boot = summary([r["boot_s"] for r in rs])
        slow = summary([100.0 * (r["boot_s"] / base - 1) for r in rs])
        med = {k: summary([r[k] for r in rs])["median"] for k in ("ebpf_events", "pauses", "paused_s",
                                                                    "named_ebpf", "named_remote")}
        row = {"mode": mode, "boot_s": boot, "slowdown_pct": slow, "ebpf_events": rs[-1]["ebpf_events"],
               "lost": sum(r["lost"] for r in rs), "pauses": rs[-1]["pauses"], "median": med, "rounds": rs}
        rows.append(row)
        verdict = ""
        if mode == "ebpf":
            verdict = " (target <= 5%: " + ("met)" if slow["median"] <= TARGET_PCT else "MISSED)")
        table_rows.append([mode, fmt(boot, 3), ("-" if mode == "none" else fmt(slow, 1) + verdict),
                           f"{med['ebpf_events']:.0f}", row["lost"], f"{med['pauses']:.0f} ({med['paused_s']:.2f} s)",
                           f"{med['named_ebpf']:.0f} / {med['named_remote']:.0f}"])
    table = common.markdown_table(["sidecar", "boot s", "slowdown %", "eBPF events", "lost", "pauses (paused)",
                                   "ISeqs named eBPF / remote"], table_rows)
    params = {"files": files, "methods": methods, "rounds": rounds, "rate_hz": 1000, "target_pct": TARGET_PCT,
              "modes": {m: " ".join(a) if a is not None else None for m, a in MODES.items()}}
    common.write_result(cfg, NAME, params, rows, table)
    return (f"### boot_symbolizer ({files} files, {methods} evaluated methods, median of {rounds} rounds, "
            f"(min-max); {common.machine(cfg)['pinning']})\n\n{table}\n")
