"""Every write can fail: a real full tmpfs (mounted here, 1 MiB) and /dev/full. The sidecar stops
recording with exit 8 and one line, the trace it wrote so far whole and readable; sdb-symbolize exits
24 with one line, for every format, and leaves no half-written profile (nor a temporary file)."""
from __future__ import annotations

import os
import subprocess

import pytest

from conftest import SYMBOLIZE, assert_one_error_line, record_program, run_sidecar, run_symbolize
from sdb_trace import load_tables
from sdb_symbolize.reporters import REPORTERS

pytestmark = [pytest.mark.once,
              pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")]

OUTPUT_SIDECAR, OUTPUT_SYMBOLIZE = 8, 24


@pytest.fixture
def small_tmpfs(tmp_path):
    """A real 1 MiB tmpfs, unmounted at teardown."""
    mnt = tmp_path / "full"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", str(mnt)], check=True)
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(mnt, leave: int) -> None:
    """Fills the tmpfs but for about `leave` bytes."""
    st = os.statvfs(mnt)
    free = st.f_bavail * st.f_frsize
    with open(mnt / "filler", "wb") as f:
        f.write(b"\0" * max(0, free - leave))


def test_attach_onto_a_full_tmpfs_stops_with_exit_8_and_leaves_a_readable_trace(ruby_target, small_tmpfs):
    # GIVEN a program whose trace grows fast, and 100 KiB left on a real tmpfs
    target = ruby_target("deep_churn.rb")
    fill(small_tmpfs, 100 * 1024)
    out = small_tmpfs / "trace.msgpack"
    # WHEN attach records onto it for up to 60 s
    result = run_sidecar("attach", "--pid", str(target.pid), "--no-ebpf", "-d", "60", "-o", str(out), "--quiet",
                         timeout=120)
    # THEN it stops on ENOSPC with the output's exit code and one line (no traceback, no SIGSEGV)
    assert result.returncode == OUTPUT_SIDECAR, (result.returncode, result.stderr[-2000:])
    line = assert_one_error_line(result, "sdb-sidecar")
    assert "No space left on device" in line and "recording stopped" in line, line
    assert target.alive(), "the target must run on"
    # AND the trace holds whole records up to the failure: read to its end with no damage, cut short
    tables = load_tables(str(out))
    assert tables.error is None, tables.error
    assert tables.end is None
    assert tables.sample_count > 1000, tables.sample_count
    sym = run_symbolize(str(out), "--format", "summary")
    assert sym.returncode == 0, sym.stderr
    assert "recording was cut short" in sym.stderr and "Traceback" not in sym.stderr


@pytest.fixture(scope="module")
def churn_trace(tmp_path_factory):
    return record_program(tmp_path_factory.mktemp("writes"), "deep_churn.rb", duration_s=1.5)


@pytest.mark.parametrize("fmt", sorted(REPORTERS))
def test_symbolize_to_dev_full_exits_24_with_one_line(churn_trace, fmt):
    result = run_symbolize(str(churn_trace), "--format", fmt, "-o", "/dev/full")
    assert result.returncode == OUTPUT_SYMBOLIZE, (result.returncode, result.stderr[-2000:])
    assert "No space left on device" in assert_one_error_line(result, "sdb-symbolize")


@pytest.mark.parametrize("fmt", sorted(REPORTERS))
def test_symbolize_stdout_to_dev_full_exits_24_with_one_line(churn_trace, fmt):
    with open("/dev/full", "wb") as full:
        result = subprocess.run([*SYMBOLIZE, str(churn_trace), "--format", fmt],
                                stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
    assert result.returncode == OUTPUT_SYMBOLIZE, (result.returncode, result.stderr[-2000:])
    assert "No space left on device" in assert_one_error_line(result, "sdb-symbolize")


@pytest.mark.parametrize("fmt", sorted(REPORTERS))
def test_symbolize_onto_a_full_tmpfs_exits_24_and_keeps_the_old_file(churn_trace, small_tmpfs, fmt):
    # GIVEN an earlier profile at the output path, and a full tmpfs
    out = small_tmpfs / "profile.out"
    out.write_bytes(b"the earlier profile\n")
    fill(small_tmpfs, 0)
    # WHEN sdb-symbolize writes there
    result = run_symbolize(str(churn_trace), "--format", fmt, "-o", str(out))
    # THEN exit 24, one line; the earlier file is as it was and no temporary file is left
    assert result.returncode == OUTPUT_SYMBOLIZE, (result.returncode, result.stderr[-2000:])
    assert "No space left on device" in assert_one_error_line(result, "sdb-symbolize")
    assert out.read_bytes() == b"the earlier profile\n"
    assert sorted(p.name for p in small_tmpfs.iterdir()) == ["filler", "profile.out"]
