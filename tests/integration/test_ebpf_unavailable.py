"""Without eBPF (here: not root) the sidecar says so once and names every ISeq by remote reads; a test
waiting for its eBPF learns why at once."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager

import pytest

from conftest import PROGRAMS, REPO, read_trace, ruby_cmd, ruby_env, stderr_lines
from ebpf_wait import wait_for_ebpf

pytestmark = pytest.mark.once
NOBODY = 65534


def as_nobody(argv):
    """argv run as an unprivileged user: as nobody when we are root, else as ourselves."""
    if os.geteuid() != 0:
        return argv
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv]


@contextmanager
def app_of_nobody():
    """eval_after_attach.rb run as an unprivileged user (as_nobody) in a folder of its own, ready:
    (the Popen, the folder); killed, its folder and registry removed after."""
    folder = tempfile.mkdtemp(prefix="sdb-noebpf-")
    os.chmod(folder, 0o777)
    target = subprocess.Popen(as_nobody(ruby_cmd(PROGRAMS / "eval_after_attach.rb")), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=folder,
                              env=ruby_env())
    try:
        assert target.stdout.readline().startswith("ready"), "the target did not start"
        yield target, folder
    finally:
        target.kill()
        target.wait()
        shutil.rmtree(folder, ignore_errors=True)
        try:
            os.unlink(f"/dev/shm/sdb-{target.pid}")
        except FileNotFoundError:
            pass


@pytest.mark.skipif(os.geteuid() == 0 and shutil.which("setpriv") is None,
                    reason="running as root without setpriv: cannot run the sidecar unprivileged")
def test_not_root_gives_one_notice_and_remote_names():
    # GIVEN an app and a sidecar running as the same unprivileged user
    with app_of_nobody() as (target, folder):
        out = os.path.join(folder, "trace.msgpack")
        sidecar = subprocess.Popen(as_nobody([sys.executable, "-m", "sdb_sidecar.cli", "attach", "--pid",
                                              str(target.pid), "-d", "3", "-o", out, "-q"]),
                                   stderr=subprocess.PIPE, text=True, cwd=str(REPO))
        # WHEN the app defines and runs methods while recorded
        target.stdin.write(f"go {folder}\n")
        target.stdin.flush()
        _, err = sidecar.communicate(timeout=60)
        # THEN one line says eBPF is not used and why, and nothing else is printed
        assert sidecar.returncode == 0, err
        lines = stderr_lines(err)
        assert len(lines) == 1 and lines[0].startswith("sdb: notice: no eBPF symbolizer (not running as root)"), lines
        # AND every symbol came from a remote read, the evaluated methods included
        trace = read_trace(out)
        assert trace.end["ebpf"] is None
        iseqs = [r for r in trace.records if r["t"] == "iseq"]
        assert iseqs and {r["source"] for r in iseqs} == {"remote"}
        assert any(r["label"] == "sdb_loaded_method" for r in iseqs)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root and setpriv, to run a sidecar that cannot have eBPF")
def test_waiting_for_ebpf_that_will_not_come_fails_at_once_with_the_sidecars_reason(sidecar_process):
    # GIVEN a sidecar that cannot have eBPF (not root), recording an app of its own user for 600 s
    with app_of_nobody() as (target, folder):
        out = os.path.join(folder, "trace.msgpack")
        sidecar = sidecar_process("attach", "--pid", str(target.pid), "-d", "600", "-o", out, "-q",
                                  prefix=as_nobody([]))
        # WHEN a test waits for its eBPF symbolizer
        with pytest.raises(pytest.fail.Exception) as failed:
            wait_for_ebpf(sidecar, out)
        # THEN the wait ends on the sidecar's notice (not at its patience's end, nor at the sidecar's
        # exit: it still records), and says why eBPF will not come
        assert sidecar.poll() is None
        assert "will not come, the sidecar said: sdb: notice: no eBPF symbolizer (not running as root)" \
            in str(failed.value), str(failed.value)
