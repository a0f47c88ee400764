"""The package as a user installs it: a wheel built from pyproject.toml, installed in a new
virtualenv (the system's Python, nothing of the source tree on its path and no path to Debian's
packages), records a Ruby program with eBPF naming its ISeqs at birth and symbolizes the trace."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ebpf_missing, REPO
from ebpf_wait import wait_for_ebpf

pytestmark = pytest.mark.once


def run(cmd, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=600, **kw)
    assert r.returncode == 0, f"{cmd}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


def ebpf_names_so_far(venv_python, path) -> int:
    """ISeq records named by eBPF in the trace being written, read with the venv's own sdb_trace."""
    r = subprocess.run([str(venv_python), "-c", (
        "import sys\n"
        "from sdb_trace import TraceError, TraceReader\n"
        "n = 0\n"
        "try:\n"
        "    with TraceReader(sys.argv[1]) as r:\n"
        "        for rec in r.records():\n"
        "            n += rec['t'] == 'iseq' and rec.get('source') == 'ebpf'\n"
        "except (TraceError, OSError):\n"
        "    pass\n"
        "print(n)\n"), str(path)], capture_output=True, text=True, timeout=60)
    return int(r.stdout.strip() or 0)


@pytest.mark.skipif(bool(ebpf_missing()), reason=f"no eBPF here: {ebpf_missing()}")
def test_a_wheel_in_a_clean_virtualenv_records_with_ebpf_and_symbolizes(tmp_path, ruby_target):
    # GIVEN a wheel built from pyproject.toml, installed in a new virtualenv of the system's Python
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "pip", "wheel", "-q", "--disable-pip-version-check", "--no-build-isolation",
         "--no-deps", "-w", dist, REPO])
    wheels = list(dist.glob("sdb-*.whl"))
    assert len(wheels) == 1, wheels
    venv = tmp_path / "venv"
    run([sys._base_executable, "-m", "venv", venv])
    run([venv / "bin" / "pip", "install", "-q", "--disable-pip-version-check", wheels[0]])
    py = venv / "bin" / "python"
    where = run([py, "-c", "import json, sys, sdb_sidecar, sdb_symbolize; "
                           "print(json.dumps([sdb_sidecar.__file__, sdb_symbolize.__file__, sys.path]))"],
                cwd=tmp_path).stdout
    sidecar_file, symbolize_file, path = json.loads(where)
    # (by path, not by string: a temp dir named like the checkout, /x/repo.tmp, is not in /x/repo)
    assert all(Path(f).is_relative_to(venv) for f in (sidecar_file, symbolize_file)), where
    assert not any(p and Path(p).resolve().is_relative_to(Path(REPO).resolve()) for p in path), where
    assert "dist-packages" not in where, where
    # WHEN its sdb-sidecar records a program that defines methods all the time, until eBPF named some
    target = ruby_target("evals_forever.rb")
    trace = tmp_path / "trace.msgpack"
    with open(tmp_path / "sidecar.stderr", "w") as err:
        sidecar = subprocess.Popen([str(venv / "bin" / "sdb-sidecar"), "attach", "--pid", str(target.pid),
                                    "-o", str(trace), "--quiet"], cwd=str(tmp_path), stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=err)
    try:
        wait_for_ebpf(sidecar, lambda: ebpf_names_so_far(py, trace) >= 10, what="10 ISeqs named by eBPF in the trace",
                      stderr=lambda: (tmp_path / "sidecar.stderr").read_text(), interval=0.5)
        assert sidecar.poll() is None, (tmp_path / "sidecar.stderr").read_text()
        sidecar.send_signal(signal.SIGINT)
        assert sidecar.wait(60) == 0, (tmp_path / "sidecar.stderr").read_text()
    finally:
        if sidecar.poll() is None:
            sidecar.kill()
            sidecar.wait()
    # THEN the trace says eBPF was attached, and no warning said it was not
    assert "eBPF" not in (tmp_path / "sidecar.stderr").read_text(), (tmp_path / "sidecar.stderr").read_text()
    # AND the venv's sdb-symbolize names the evaluated methods
    out = run([venv / "bin" / "sdb-symbolize", trace, "--format", "collapsed", "--idle", "--no-progress"],
              cwd=tmp_path).stdout
    assert "Object#sdb_evaluated_" in out, out[:2000]
