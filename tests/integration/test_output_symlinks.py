"""Outputs are opened safely (docs/guide.md, "Output files"): run as root, `-o` does not write through a symlink
that another, real user planted in a sticky directory (/tmp) or in a directory that user owns, nor into
that user's file: the victim keeps its bytes, the name gets a new file of root's. A symlink of one's
own, and devices such as /dev/null, are still written through."""
from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import record_program, run_sidecar, run_symbolize
from sdb_trace import load_tables

pytestmark = [pytest.mark.once, pytest.mark.skipif(os.geteuid() != 0, reason="the attack needs root as the victim")]

OTHER_USER = "sdb-mallory"
VICTIM_TEXT = b"the victim's own bytes\n"


@pytest.fixture(scope="module")
def other_user():
    """A real second, unprivileged user (created with useradd when missing)."""
    try:
        return pwd.getpwnam(OTHER_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", OTHER_USER],
                       check=True)
        return pwd.getpwnam(OTHER_USER)


def as_user(user, *argv: str) -> None:
    subprocess.run(["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups", *argv],
                   check=True)


@pytest.fixture
def victim(tmp_path):
    path = tmp_path / "victim"
    path.write_bytes(VICTIM_TEXT)
    return path


@pytest.fixture
def sticky_link(other_user, victim):
    """/tmp/<name>: a symlink to the victim, made by the other user in sticky /tmp."""
    name = Path(tempfile.mktemp(prefix="sdb-planted-", dir="/tmp"))
    as_user(other_user, "ln", "-s", str(victim), str(name))
    assert name.is_symlink() and name.lstat().st_uid == other_user.pw_uid
    yield name
    name.unlink(missing_ok=True)


@pytest.fixture
def owned_dir_link(other_user, victim):
    """<dir>/out: a symlink to the victim in a directory the other user owns."""
    folder = Path(tempfile.mkdtemp(prefix="sdb-mallory-", dir="/tmp"))
    os.chown(folder, other_user.pw_uid, other_user.pw_gid)
    name = folder / "out"
    as_user(other_user, "ln", "-s", str(victim), str(name))
    yield name
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    return record_program(tmp_path_factory.mktemp("links"), "parked.rb", duration_s=0.5)


def assert_replaced_not_followed(link: Path, victim: Path) -> bytes:
    assert victim.read_bytes() == VICTIM_TEXT, "the victim was written through the symlink"
    assert not link.is_symlink() and link.is_file()
    assert link.stat().st_uid == 0
    return link.read_bytes()


@pytest.mark.parametrize("where", ["sticky_link", "owned_dir_link"])
def test_symbolize_as_root_replaces_another_users_symlink_instead_of_following_it(request, where, victim, trace):
    link = request.getfixturevalue(where)
    result = run_symbolize(str(trace), "--format", "collapsed", "-o", str(link))
    assert result.returncode == 0, result.stderr
    assert b"parked" in assert_replaced_not_followed(link, victim)


@pytest.mark.parametrize("where", ["sticky_link", "owned_dir_link"])
def test_attach_as_root_replaces_another_users_symlink_instead_of_following_it(request, where, victim, ruby_target):
    link = request.getfixturevalue(where)
    target = ruby_target("parked.rb")
    result = run_sidecar("attach", "--pid", str(target.pid), "--no-ebpf", "-d", "0.5", "-o", str(link), "--quiet")
    assert result.returncode == 0, result.stderr
    assert_replaced_not_followed(link, victim)
    assert load_tables(str(link)).sample_count > 0


def test_symbolize_does_not_write_into_another_users_file_in_sticky_tmp(other_user, trace):
    name = Path(tempfile.mktemp(prefix="sdb-theirs-", dir="/tmp"))
    as_user(other_user, "sh", "-c", f"echo theirs > {name}")
    other_inode = name.stat().st_ino
    try:
        result = run_symbolize(str(trace), "--format", "summary", "-o", str(name))
        assert result.returncode == 0, result.stderr
        assert name.stat().st_ino != other_inode and name.stat().st_uid == 0
        assert name.read_text().startswith("sdb summary")
    finally:
        name.unlink(missing_ok=True)


def test_own_symlink_and_dev_null_are_written_through(tmp_path, trace):
    real = tmp_path / "real.collapsed"
    real.write_text("old\n")
    link = tmp_path / "mine.collapsed"
    link.symlink_to(real)
    result = run_symbolize(str(trace), "--format", "collapsed", "-o", str(link))
    assert result.returncode == 0, result.stderr
    assert link.is_symlink() and "parked" in real.read_text()
    result = run_symbolize(str(trace), "--format", "pprof", "-o", "/dev/null")
    assert result.returncode == 0, result.stderr
    assert Path("/dev/null").is_char_device()
