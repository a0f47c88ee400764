"""Every command and subcommand answers `--help` and `-h`: usage on stdout, exit 0, no traceback."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sdb_sidecar.commands import COMMANDS

pytestmark = pytest.mark.once

BIN = Path(sys.executable).parent
SIDECAR_INVOCATIONS = [[]] + [[cmd.name] for cmd in COMMANDS]


@pytest.mark.parametrize("flag", ["--help", "-h"])
@pytest.mark.parametrize("words", SIDECAR_INVOCATIONS, ids=lambda w: " ".join(w) or "sdb-sidecar")
def test_sdb_sidecar_help_prints_usage_and_exits_0(words, flag):
    result = subprocess.run([str(BIN / "sdb-sidecar"), *words, flag], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and result.stderr == ""
    assert result.stdout.startswith("usage: sdb-sidecar" + (" " + words[0] if words else ""))
    if not words:
        for cmd in COMMANDS:        # every subcommand is listed with its one-line help
            assert f"    {cmd.name} " in result.stdout


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_sdb_symbolize_help_prints_usage_and_exits_0(flag):
    result = subprocess.run([str(BIN / "sdb-symbolize"), flag], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.startswith("usage: sdb-symbolize")
