"""The outputs of a given sdb-symbolize on the format-3 corpus (tests/unit/format3_corpus/), as the
manifest tests/unit/test_format3_outputs.py compares today's against (outputs.json: per trace and
command line, the exit code, the sha256 of the profile and stderr).

    # the symbolizer of a commit, e.g. ed9dcc2 (before profiles became a library):
    git archive ed9dcc2 symbolizer | tar -x -C /tmp/old
    .venv/bin/python tests/support/format3_outputs.py --symbolizer /tmp/old/symbolizer

Without --symbolizer it runs this tree's. It is run by hand, when a change to the outputs is meant
(say which in the commit): the test then holds the new outputs."""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CORPUS = Path(__file__).resolve().parent.parent / "unit" / "format3_corpus"
FORMATS = ("collapsed", "speedscope", "pprof", "flamegraph", "firefox", "summary", "summary-by-line", "json",
           "endpoints")
# the command lines every trace is rendered with: every format alone and with the options that change
# stacks and sample choice, and a few options of their own
VARIANTS = [["--format", f] for f in FORMATS] + [["--format", f, "--idle", "--states"] for f in FORMATS] + [
    ["--format", "collapsed", "--no-lines", "--labels", "ruby-profile-frames"],
    ["--format", "collapsed", "--idle", "--merge-processes"],
    ["--format", "collapsed", "--by", "endpoint", "--idle"],
    ["--format", "speedscope", "--by", "request"],
    ["--format", "json", "--json-frames", "--from", "0.005", "--to", "0.5"],
    ["--format", "pprof", "--idle", "--no-lines"],
]


def cases():
    """(trace file name, argv) for every case of the corpus."""
    for trace in sorted(p.name for p in CORPUS.glob("*.msgpack")):
        for v in VARIANTS:
            yield trace, v


def key(trace: str, argv) -> str:
    return " ".join([trace, *argv])


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--symbolizer", help="the folder holding the sdb_symbolize and sdb_trace packages to run "
                                        "(default: this tree's)")
    args = p.parse_args()
    env = dict(os.environ)
    if args.symbolizer:
        env["PYTHONPATH"] = os.path.abspath(args.symbolizer)
    manifest = {}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "profile"
        for trace, argv in cases():
            r = subprocess.run([sys.executable, "-m", "sdb_symbolize.cli", trace, *argv, "-o", str(out),
                                "--no-progress"], capture_output=True, cwd=str(CORPUS), env=env, timeout=120)
            manifest[key(trace, argv)] = {"rc": r.returncode, "stderr": r.stderr.decode(),
                                          "sha256": digest(out.read_bytes()) if out.exists() else None}
            if out.exists():
                out.unlink()
    (CORPUS / "outputs.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
