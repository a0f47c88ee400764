"""`make test` builds Ruby from source on a machine without the cache; Ruby's Makefile needs make's
built-in rules, which our Makefile turns off (MAKEFLAGS reaches child makes through the environment).
The guard `scripts/rubies --check-make-env` builds a program the way a Ruby is built: it must pass as
scripts/rubies is, and fail if the build ever inherits the caller's make environment again."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.once

RUBIES = Path(__file__).resolve().parents[2] / "scripts" / "rubies"


def run_guard(script: Path, makeflags: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, MAKEFLAGS=makeflags, MFLAGS="-" + makeflags.lstrip("-"), MAKELEVEL="1")
    return subprocess.run(["bash", str(script), "--check-make-env"], env=env, capture_output=True, text=True,
                          timeout=120)


def test_the_ruby_build_ignores_the_callers_makeflags():
    # GIVEN the environment `make test` gives its recipes (our Makefile sets --no-builtin-rules)
    result = run_guard(RUBIES, "r --no-builtin-rules")
    # THEN the guard's build, done as a Ruby's is, succeeds
    assert result.returncode == 0, result.stderr


def test_the_guard_fails_when_the_build_inherits_makeflags(tmp_path):
    # GIVEN scripts/rubies with the line that cleans the make environment taken out
    text = RUBIES.read_text()
    assert text.count("\n    clean_make_env\n") == 1
    leaky = tmp_path / "rubies"
    leaky.write_text(text.replace("\n    clean_make_env\n", "\n    :\n"))
    # THEN the guard fails, saying why
    result = run_guard(leaky, "r --no-builtin-rules")
    assert result.returncode != 0
    assert "inherits its caller's make environment" in result.stderr
