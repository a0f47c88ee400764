"""The sampler's C units (sidecar/sdb_sidecar/sampler/native/*.c), each tested on its own: every
tests/unit/native/test_<unit>.c is compiled with its unit and run; it exits 0 when every CHECK held
and names each one that did not. (The Cython glue over them is tested through the sampler.)"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NATIVE = REPO / "sidecar" / "sdb_sidecar" / "sampler" / "native"
TESTS = Path(__file__).resolve().parent / "native"
CC = shutil.which("cc") or shutil.which("gcc")


def units():
    return sorted(p.stem[len("test_"):] for p in TESTS.glob("test_*.c"))


def test_every_native_unit_has_a_test_program():
    assert sorted(p.stem for p in NATIVE.glob("*.c")) == units()


@pytest.mark.skipif(CC is None, reason="no C compiler (cc) on this machine")
@pytest.mark.parametrize("unit", units())
def test_native_unit(unit, tmp_path):
    exe = tmp_path / f"test_{unit}"
    build = subprocess.run([CC, "-std=gnu11", "-O1", "-g", "-Wall", "-Werror", "-fsanitize=address,undefined",
                            f"-I{NATIVE}", f"-I{REPO / 'gem' / 'ext' / 'sdb'}", f"-I{TESTS}",
                            "-pthread", "-o", str(exe), str(TESTS / f"test_{unit}.c"), str(NATIVE / f"{unit}.c")],
                           capture_output=True, text=True, timeout=120)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, f"{unit}: checks failed:\n{run.stderr}{run.stdout}"
