"""The sampler's walk on a saved memory image, no Ruby needed: tests/unit/memimage/ruby-3.1 holds what
one tick read of tests/programs/image_zoo.rb on Debian's Ruby 3.1 (blocks, C functions calling blocks,
a singleton method, instance_eval, 30 nested calls), its registry and what the sampler made of it
(tests/support/memimage.py capture). memimage_host maps those bytes at their addresses; a fresh
Sampler reading that process must make the same frames, stacks and samples, and refuse what a
changed byte makes untrue."""
from __future__ import annotations

import json
import shutil
import struct
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
import memimage  # noqa: E402

IMAGE = Path(__file__).resolve().parent / "memimage" / "ruby-3.1"
KIND_RUBY = 0

pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                                reason="no C compiler (cc) to build memimage_host")


def expected():
    doc = json.loads((IMAGE / "expected.json").read_text())
    return {k: [tuple(x) if isinstance(x, list) and k != "stacks" else x for x in v] for k, v in doc.items()}


def walk(image_dir: Path, tmp_path: Path):
    from sdb_sidecar._registry import RegistryError
    host = memimage.Host(image_dir, tmp_path)
    try:
        sampler, drained = memimage.sample_once(host.registry, host.pid)
        return sampler.stats(), memimage.comparable(drained)
    except RegistryError as e:
        pytest.fail(f"{e}: the saved registry is of an older format; save the image again with Debian's Ruby 3.1 "
                    f"(make setup, then: .venv/bin/python tests/support/memimage.py capture --out {IMAGE})")
    finally:
        host.close()


def test_the_walk_on_the_image_makes_what_it_made_on_the_live_ruby(tmp_path):
    stats, got = walk(IMAGE, tmp_path)
    want = expected()
    assert got["frames"] == want["frames"]
    assert got["stacks"] == want["stacks"]
    assert got["samples"] == want["samples"]
    assert got["new_iseqs"] == want["new_iseqs"] and got["new_mes"] == want["new_mes"]
    assert stats["torn"] == 0 and stats["retried"] == 0
    # the image is the program's: five threads, one deep
    assert len(want["samples"]) == 5 and max(len(s) for s in want["stacks"]) > 30


def test_an_iseq_whose_type_tag_changed_is_refused(tmp_path):
    # GIVEN the image with one Ruby frame's ISeq no longer an imemo (its flags' type bits changed)
    want = expected()
    iseq = next(i for kind, i, _, _ in want["frames"] if kind == KIND_RUBY)
    image = bytearray((IMAGE / "image.bin").read_bytes())
    at = 8
    while at < len(image):
        addr, n = struct.unpack_from("<QQ", image, at)
        if addr <= iseq < addr + n:
            image[at + 16 + (iseq - addr)] ^= 0x1f          # RBasic.flags' low bits: T_IMEMO no more
            break
        at += 16 + n
    else:
        pytest.fail(f"the image does not hold ISeq 0x{iseq:x}")
    changed = tmp_path / "changed"
    changed.mkdir()
    (changed / "image.bin").write_bytes(bytes(image))
    shutil.copy(IMAGE / "registry.gz", changed / "registry.gz")
    # WHEN the sampler reads it
    stats, got = walk(changed, tmp_path)
    # THEN the threads whose stacks hold it are torn (read twice, refused), the others as before
    holders = {s for s, stack in enumerate(want["stacks"]) if any(want["frames"][f][1] == iseq for f in stack)}
    assert holders
    assert stats["torn"] == sum(1 for _, s, _ in want["samples"] if s in holders)
    assert all(f[1] != iseq for f in got["frames"])
    assert len(got["samples"]) == len(want["samples"]) - stats["torn"]
