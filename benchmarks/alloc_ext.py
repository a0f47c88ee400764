"""Builds benchmarks/programs/alloc_hook (the measurement-only extension of issue 42's benchmarks)
with a Ruby's own mkmf into a directory of its own, and lists the Rubies to measure."""
from __future__ import annotations

import os
import shutil
import subprocess

import common

SRC = os.path.join(common.PROGRAMS, "alloc_hook")
RUBY_405 = "/var/cache/sdb/rubies/4.0.5/bin/ruby"


def rubies(given: list) -> list:
    """--ruby paths if given, else build/rubies.txt's (Debian's 3.1, 3.3.8, 3.4.5) and 4.0.5 once built."""
    if given:
        return given
    found = []
    listing = os.path.join(common.ROOT, "build", "rubies.txt")
    if os.path.exists(listing):
        with open(listing) as f:
            found = [line.split()[1] for line in f if len(line.split()) == 2]
    if os.access(RUBY_405, os.X_OK):
        found.append(RUBY_405)
    return found or ["/usr/bin/ruby"]


def version(ruby: str) -> str:
    return subprocess.run([ruby, "-e", "print RUBY_VERSION"], capture_output=True, text=True, check=True).stdout


def build(ruby: str, into: str) -> str:
    """Compile the extension for this Ruby under `into`; return the directory to put on -I."""
    out = os.path.join(into, version(ruby))
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    for cmd in ([ruby, os.path.join(SRC, "extconf.rb")], ["make", "-s"]):
        r = subprocess.run(cmd, cwd=out, capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(f"building alloc_hook for {ruby} failed ({' '.join(cmd)}):\n{r.stdout}{r.stderr}")
    return out
