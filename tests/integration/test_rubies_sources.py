"""Where scripts/rubies gets Ruby from: the Debian mirror is the one this machine's apt configuration
names (users behind a mirror or a proxy have no other way out), never a host written into the
script; and a Ruby tarball given by path or URL is named by its file (ruby-X.Y.Z.tar.*), a name it
cannot read refused before anything is built."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.once

RUBIES = Path(__file__).resolve().parents[2] / "scripts" / "rubies"


def mirrors(apt_etc: Path) -> str:
    r = subprocess.run(["bash", str(RUBIES), "--debian-mirrors"], env=dict(os.environ, SDB_APT_ETC=str(apt_etc)),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_the_mirror_is_the_one_a_deb822_sources_file_names(tmp_path):
    # GIVEN apt configured (deb822, as Debian 12 installs it) with a proxy for both archives, and
    # sdb's own deb-src list naming another host
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\n# http://snapshot.debian.org/archive/debian/20250520T000000Z\n"
        "URIs: http://proxy.local:3142/debian\nSuites: bookworm bookworm-updates\nComponents: main\n\n"
        "Types: deb\nURIs: http://proxy.local:3142/debian-security\nSuites: bookworm-security\nComponents: main\n")
    (tmp_path / "sources.list.d" / "sdb-ruby-src.sources").write_text(
        "Types: deb-src\nURIs: http://elsewhere.example/debian\nSuites: trixie\nComponents: main\n")
    # THEN both mirrors are the proxy's
    assert mirrors(tmp_path) == "http://proxy.local:3142/debian http://proxy.local:3142/debian-security"


def test_the_mirror_is_the_one_a_one_line_sources_list_names(tmp_path):
    # GIVEN the one-line format, options in brackets, a commented-out entry first, a trailing slash
    (tmp_path / "sources.list").write_text(
        "# deb http://commented.example/debian bookworm main\n"
        "deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://mirror.example.org/debian/ bookworm main\n"
        "deb http://security.example.org/debian-security bookworm-security main\n")
    assert mirrors(tmp_path) == "http://mirror.example.org/debian http://security.example.org/debian-security"


def test_without_any_apt_source_the_mirror_is_debians_own(tmp_path):
    assert mirrors(tmp_path) == "http://deb.debian.org/debian http://deb.debian.org/debian-security"


def test_a_tarball_whose_name_gives_no_version_is_refused_before_building(tmp_path):
    tarball = tmp_path / "source.tar.xz"
    tarball.write_bytes(b"")
    r = subprocess.run(["bash", str(RUBIES), "--tarball", str(tarball)], capture_output=True, text=True,
                       timeout=60, env=dict(os.environ, SDB_CACHE=str(tmp_path / "cache")))
    assert r.returncode == 2
    assert "cannot tell the Ruby version from the name source.tar.xz" in r.stderr
    assert not (tmp_path / "cache").exists()   # nothing fetched, configured or built
