"""Format-3 traces give the outputs they gave before: every format, with the options that change
stacks and sample choice, on the corpus in tests/unit/format3_corpus/ (a real 1 kHz recording of
tests/programs/formats.rb, a process tree, two processes with requests, jobs, labels, a reused
address and an eBPF pause, and a recording cut short), compared with the outputs of ed9dcc2's
sdb-symbolize (outputs.json, made by tests/support/format3_outputs.py: exit code, stderr, and the
profile's sha256)."""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
from format3_outputs import CORPUS, cases, key  # noqa: E402

from sdb_symbolize import cli  # noqa: E402

pytestmark = pytest.mark.once

EXPECTED = json.loads((CORPUS / "outputs.json").read_text())


def test_the_manifest_covers_every_case_of_the_corpus():
    assert sorted(EXPECTED) == sorted(key(t, a) for t, a in cases())
    assert len(EXPECTED) >= 4 * 24


@pytest.mark.parametrize("trace,argv", list(cases()), ids=lambda v: v if isinstance(v, str) else " ".join(v))
def test_a_format3_trace_gives_the_output_it_gave_before(trace, argv, tmp_path, capsys, monkeypatch):
    # GIVEN a format-3 trace of the corpus, WHEN sdb-symbolize renders it (in this process)
    monkeypatch.chdir(CORPUS)
    out = tmp_path / "profile"
    rc = cli.main([trace, *argv, "-o", str(out), "--no-progress"])
    err = capsys.readouterr().err
    # THEN its exit code, its messages and its profile's bytes are those of ed9dcc2's code
    want = EXPECTED[key(trace, argv)]
    assert (rc, err) == (want["rc"], want["stderr"])
    got = hashlib.sha256(out.read_bytes()).hexdigest() if out.exists() else None
    assert got == want["sha256"]
