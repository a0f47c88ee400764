"""A registry emptied between open_target's checks and the sampler's start is an SdbError (a counted
descendant that is gone, or one clear line), never a traceback that ends the recording.

The gem lends a fork child its spare registry and, once the child is gone, takes the file back and
zeroes its header (gem/ext/sdb/sdb_file.c, the spare). A sidecar following the tree that opened the
child's file just before saw the header checked, then its own copy of the layout all zeros (test_soak
on 3.1, on a loaded machine: `RegistryError: ... control frame size 0` out of the recorder's scan). Here the
registry is a saved one (tests/unit/memimage), emptied as the gem empties it, after the open."""
from __future__ import annotations

import gzip
import os
import subprocess
from pathlib import Path

import pytest

from sdb_sidecar.sampler._registry import Registry
from sdb_sidecar.errors import Exit, SdbError
from sdb_sidecar.recording.options import DEFAULTS
from sdb_sidecar.recording.session import new_sampler
from sdb_sidecar.target.target import Target

IMAGES = sorted((Path(__file__).resolve().parent / "memimage").iterdir())


def opened_then_emptied(image: Path, tmp_path: Path) -> Registry:
    path = tmp_path / "sdb-registry"
    with gzip.open(image / "registry.gz", "rb") as f:
        path.write_bytes(f.read())
    reg = Registry(str(path))
    reg.check()                                     # what open_target checked
    with open(path, "r+b") as f:                    # the gem's take-back: the header page zeroed
        f.write(bytes(4096))
    return reg


def gone_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


@pytest.mark.parametrize("image", IMAGES, ids=[p.name for p in IMAGES])
def test_a_registry_emptied_after_it_was_opened_is_a_gone_process_not_a_traceback(image, tmp_path):
    # GIVEN a registry opened and checked, then emptied by its process's parent (its process is gone)
    reg = opened_then_emptied(image, tmp_path)
    # WHEN a sampler is made for it
    with pytest.raises(SdbError) as e:
        new_sampler(Target(pid=gone_pid(), registry=reg, info={}, command=[]), DEFAULTS)
    # THEN it is the process's exit, which the recorder counts as a descendant gone too soon
    assert e.value.code == Exit.NO_SUCH_PROCESS, e.value


@pytest.mark.parametrize("image", IMAGES, ids=[p.name for p in IMAGES])
def test_a_registry_emptied_under_a_live_process_is_one_clear_error(image, tmp_path):
    # GIVEN the same, its process still there
    reg = opened_then_emptied(image, tmp_path)
    # WHEN a sampler is made for it, THEN an SdbError says what is wrong with the registry
    with pytest.raises(SdbError) as e:
        new_sampler(Target(pid=os.getpid(), registry=reg, info={}, command=[]), DEFAULTS)
    assert e.value.code == Exit.REGISTRY_FORMAT and "sdb-registry" in str(e.value), e.value
