"""sdb has one version: the Python packages take it from sdb_trace (pyproject.toml too), and the gem
carries the same."""
from __future__ import annotations

import re

import pytest

import sdb_sidecar
import sdb_symbolize
import sdb_trace
from conftest import REPO

pytestmark = pytest.mark.once


def test_the_packages_and_the_gem_have_one_version():
    gem = re.search(r'VERSION = "([^"]+)"', (REPO / "gem" / "lib" / "sdb" / "version.rb").read_text()).group(1)
    assert sdb_sidecar.__version__ == sdb_symbolize.__version__ == sdb_trace.__version__ == gem
    assert 'dynamic = ["version"]' in (REPO / "pyproject.toml").read_text()
