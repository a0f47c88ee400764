"""How the recorder tells a program that exec'd another one (same pid, its registry no longer mapped)
from one that is exiting (its memory already released, its maps empty): sdb_sidecar.target.process.execd_another
on real processes. A process killed by a signal passes through a moment where it is alive by pid but
maps nothing; a recording that caught it there once ended with reason "target-exec"."""
from __future__ import annotations

import mmap
import os
import subprocess
import sys
import time

import pytest

from sdb_sidecar.target.process import execd_another

pytestmark = pytest.mark.once


def _state(pid: int) -> bytes:
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read()
    return data[data.rindex(b")") + 2:].split()[0]


def test_a_process_that_has_exited_and_maps_nothing_is_not_taken_for_one_that_execd():
    # GIVEN a child that has exited and is not reaped yet: alive by pid, a zombie, no memory
    p = subprocess.Popen(["true"])
    deadline = time.monotonic() + 30
    while _state(p.pid) != b"Z":
        assert time.monotonic() < deadline, "the child never became a zombie"
        time.sleep(0.01)
    with open(f"/proc/{p.pid}/maps", "rb") as f:
        assert f.read() == b""
    try:
        # THEN it did not exec another program, whatever registry inode is asked about
        assert not execd_another(p.pid, 12345)
    finally:
        p.wait()


def test_a_process_whose_main_thread_has_exited_is_alive_maps_nothing_and_did_not_exec():
    # GIVEN a process whose main thread has ended while another runs on: the moment a process killed
    # by a signal passes through, held open. By pid it is alive (its pidfd not readable: one thread
    # runs); its maps, read through the main thread, are empty
    p = subprocess.Popen(
        [sys.executable, "-c",
         "import ctypes, threading, time\n"
         "threading.Thread(target=time.sleep, args=(600,)).start()\n"
         "print('ok', flush=True)\n"
         "ctypes.CDLL(None).pthread_exit(None)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ok"
        deadline = time.monotonic() + 30
        while _state(p.pid) != b"Z":
            assert time.monotonic() < deadline, "the main thread never ended"
            time.sleep(0.01)
        assert len(os.listdir(f"/proc/{p.pid}/task")) == 2
        with open(f"/proc/{p.pid}/maps", "rb") as f:
            assert f.read() == b""
        # THEN it did not exec another program
        assert not execd_another(p.pid, 12345)
    finally:
        p.kill()
        p.wait()


def test_a_gone_process_did_not_exec():
    p = subprocess.Popen(["true"])
    p.wait()
    assert not execd_another(p.pid, 12345)


def test_a_running_process_exec_is_told_by_its_registry_mapping(tmp_path):
    # GIVEN a live process that maps a file named like a registry, and one that maps none
    path = f"/dev/shm/sdb-test-exec-{os.getpid()}"
    with open(path, "wb") as f:
        f.write(b"\0" * mmap.PAGESIZE)
    ino = os.stat(path).st_ino
    mapper = subprocess.Popen(
        [sys.executable, "-c",
         "import mmap, sys\n"
         f"f = open({path!r}, 'r+b'); m = mmap.mmap(f.fileno(), 0)\n"
         "print('mapped', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    other = subprocess.Popen(["sleep", "600"])
    try:
        assert mapper.stdout.readline().strip() == "mapped"
        # THEN the one mapping it (by inode) did not exec; the one without it did (as far as the
        # registry can tell: a live program that maps no registry runs another program's code)
        assert not execd_another(mapper.pid, ino)
        assert execd_another(mapper.pid, ino + 1)
        assert execd_another(other.pid, ino)
    finally:
        mapper.stdin.close()
        mapper.wait(30)
        other.kill()
        other.wait()
        os.unlink(path)
