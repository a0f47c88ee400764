"""Memory images for testing the sampler's walk without a live Ruby (tests/unit/test_walk_on_memory_image.py).

capture: a running Ruby program with the gem is stopped (SIGSTOP), sampled once by a fresh Sampler that
notes every read it makes (Reads.record_reads), and those bytes are saved with a copy of its registry
and what the sampler made of them; then the program goes on. host: memimage_host.c maps the saved bytes
at their addresses in a process of its own, which a Sampler then reads as it read the Ruby.

  .venv/bin/python tests/support/memimage.py capture --ruby /usr/bin/ruby --out tests/unit/memimage/ruby-3.1
  .venv/bin/python tests/support/memimage.py capture --ruby /var/cache/sdb/rubies/3.4.5/bin/ruby --gem-home "" \
      --out tests/unit/memimage/ruby-3.4

Files in OUT: image.bin (memimage_host's format), registry.gz (the registry file), expected.json (the
drain of that one tick: frames, stacks, samples, new ISeqs and method entries) and about.json.
"""
from __future__ import annotations

import argparse
import ctypes
import gzip
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HOST_C = Path(__file__).resolve().parent / "memimage_host.c"
ADDR_NO_RANDOMIZE = 0x0040000


def merged(reads):
    """[(addr, length)] covering every read, overlapping or touching ones merged."""
    out = []
    for a, n in sorted(reads):
        if out and a <= out[-1][0] + out[-1][1]:
            out[-1][1] = max(out[-1][1], a + n - out[-1][0])
        else:
            out.append([a, n])
    return [(a, n) for a, n in out]


def comparable(drained: dict) -> dict:
    """What a tick's drain holds that depends only on the memory read (no times)."""
    return {
        "frames": list(zip(drained["frame_kind"], drained["frame_iseq"], drained["frame_pc"], drained["frame_me"])),
        "stacks": drained["stacks"],
        "samples": sorted(zip(drained["sample_thread"], drained["sample_stack"], drained["sample_state"])),
        "new_iseqs": sorted(a for a, _ in drained["new_iseqs"]),
        "new_mes": sorted((a, d, k) for a, _, d, k in drained["new_mes"]),
        "threads": sorted((t["serial"], t["name"]) for t in drained["threads"]),
    }


def sample_once(registry_path: str, pid: int, record: bool = False):
    """A fresh Sampler's one tick of process pid (no procfs: thread states from memory only)."""
    from sdb_sidecar.sampler._registry import Registry
    from sdb_sidecar.sampler._sampler import Sampler
    sampler = Sampler(Registry(registry_path), pid, 1000.0, 2048)
    sampler.use_task_dir("")
    sampler.record_reads(record)
    if not sampler.sample_once():
        raise RuntimeError(f"process {pid} is gone")
    return sampler, sampler.drain()


def capture(pid: int, registry_path: str, out: Path) -> dict:
    os.kill(pid, signal.SIGSTOP)
    try:
        while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "T":
            time.sleep(0.01)
        sampler, drained = sample_once(registry_path, pid, record=True)
        regions = merged(sampler.recorded_reads())
        sampler.record_reads(False)
        image = [(a, sampler.read_memory(a, n)) for a, n in regions]
        registry = Path(registry_path).read_bytes()
    finally:
        os.kill(pid, signal.SIGCONT)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "image.bin", "wb") as f:
        f.write(b"SDBIMG1\n")
        for a, data in image:
            f.write(struct.pack("<QQ", a, len(data)) + data)
    with gzip.open(out / "registry.gz", "wb") as f:
        f.write(registry)
    expected = comparable(drained)
    (out / "expected.json").write_text(json.dumps(expected) + "\n")
    return expected


class Host:
    """memimage_host on an image, built into tmp_dir; `pid` reads as the captured process did."""

    def __init__(self, image_dir: Path, tmp_dir: Path):
        cc = shutil.which("cc") or shutil.which("gcc")
        exe = tmp_dir / "memimage_host"
        subprocess.run([cc, "-O1", "-o", str(exe), str(HOST_C)], check=True, capture_output=True)
        self.registry = str(tmp_dir / "registry")
        with gzip.open(image_dir / "registry.gz", "rb") as f, open(self.registry, "wb") as g:
            g.write(f.read())
        libc = ctypes.CDLL(None, use_errno=True)
        self.proc = subprocess.Popen([str(exe), str(image_dir / "image.bin")], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True,
                                     preexec_fn=lambda: libc.personality(ADDR_NO_RANDOMIZE))
        line = self.proc.stdout.readline()
        if line != "ready\n":
            self.close()
            raise RuntimeError(f"memimage_host: {line!r} {self.proc.stderr.read()}")
        self.pid = self.proc.pid

    def close(self):
        self.proc.kill()
        self.proc.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["capture"])
    ap.add_argument("--ruby", default="/usr/bin/ruby")
    ap.add_argument("--gem-home", default=str(REPO / "build" / "gem-home"))
    ap.add_argument("--program", default=str(REPO / "tests" / "programs" / "image_zoo.rb"))
    ap.add_argument("--out", required=True)
    cfg = ap.parse_args()
    sys.path[:0] = [str(REPO / "sidecar"), str(REPO / "symbolizer")]
    # --gem-home "": the gem installed in that Ruby (scripts/rubies)
    env = {**os.environ, "GEM_HOME": cfg.gem_home, "GEM_PATH": cfg.gem_home} if cfg.gem_home else dict(os.environ)
    proc = subprocess.Popen([cfg.ruby, cfg.program], stdout=subprocess.PIPE, text=True, env=env)
    try:
        if proc.stdout.readline().strip() != "ready":
            raise SystemExit(f"{cfg.program} did not say ready")
        expected = capture(proc.pid, f"/dev/shm/sdb-{proc.pid}", Path(cfg.out))
        ruby = subprocess.run([cfg.ruby, "-v"], capture_output=True, text=True).stdout.strip()
        (Path(cfg.out) / "about.json").write_text(json.dumps(
            {"ruby": ruby, "program": os.path.relpath(cfg.program, REPO), "samples": len(expected["samples"]),
             "frames": len(expected["frames"]), "image_bytes": os.path.getsize(Path(cfg.out) / "image.bin")}) + "\n")
        print(json.dumps(json.loads((Path(cfg.out) / "about.json").read_text())))
    finally:
        proc.kill()
        proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
