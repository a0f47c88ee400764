"""libbcc (LLVM inside: tens to hundreds of ms of relocations) is loaded by a call to dlopen, which
lets go of the GIL while it runs, before bcc's Python module loads it with ctypes.CDLL, which holds
the GIL through dlopen and stalled every thread of the sidecar (on a loaded machine a child found then
lost its first ~0.7 s of samples). What it costs the other threads: benchmarks/child_first_sample.py."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sdb_sidecar.ebpf import bpfload

CHECK = """
import sys
from sdb_sidecar.ebpf import bpfload
def mapped():
    with open("/proc/self/maps") as f:
        return any("libbcc.so" in line for line in f)
before = mapped()
bpfload._load_libbcc()
print(before, mapped(), "bcc" in sys.modules)
"""


@pytest.mark.skipif(not any(os.path.exists(os.path.join(d, bpfload.LIBBCC))
                            for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib")),
                    reason="no libbcc on this machine (Debian: libbpfcc)")
def test_libbcc_is_loaded_by_a_dlopen_call_before_bccs_import():
    # GIVEN a fresh interpreter, libbcc not loaded
    r = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert r.returncode == 0, r.stderr
    # WHEN the sidecar loads it THEN it is mapped, and bcc's Python module is not imported for it
    assert r.stdout.split() == ["False", "True", "False"], r.stdout
