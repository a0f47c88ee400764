"""The sampler's walk on saved memory images, no Ruby needed: tests/unit/memimage/ruby-3.1 and ruby-3.4
hold what one tick read of tests/programs/image_zoo.rb on Debian's Ruby 3.1 and on 3.4.5 (blocks, C
functions calling blocks, a singleton method, instance_eval, 30 nested calls), its registry and what
the sampler made of it (tests/support/memimage.py capture). memimage_host maps those bytes at their addresses; a fresh
Sampler reading that process must make the same frames, stacks and samples, and refuse what a
changed byte makes untrue."""
from __future__ import annotations

import gzip
import json
import shutil
import struct
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
import memimage  # noqa: E402

IMAGES = sorted((Path(__file__).resolve().parent / "memimage").iterdir())
KIND_RUBY = 0
KIND_CFUNC = 1

pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                                reason="no C compiler (cc) to build memimage_host")


@pytest.fixture(params=IMAGES, ids=[p.name for p in IMAGES])
def image(request) -> Path:
    return request.param


def expected(image: Path):
    doc = json.loads((image / "expected.json").read_text())
    return {k: [tuple(x) if isinstance(x, list) and k != "stacks" else x for x in v] for k, v in doc.items()}


def walk(image_dir: Path, tmp_path: Path):
    from sdb_sidecar.sampler._registry import RegistryError
    host = memimage.Host(image_dir, tmp_path)
    try:
        sampler, drained = memimage.sample_once(host.registry, host.pid)
        return sampler.stats(), memimage.comparable(drained)
    except RegistryError as e:
        about = json.loads((image_dir / "about.json").read_text())
        pytest.fail(f"{e}: the saved registry is of an older format; save the image again with {about['ruby']} "
                    f"(tests/support/memimage.py capture --ruby RUBY --out {image_dir}: its docstring)")
    finally:
        host.close()


def test_the_walk_on_the_image_makes_what_it_made_on_the_live_ruby(image, tmp_path):
    stats, got = walk(image, tmp_path)
    want = expected(image)
    assert got["frames"] == want["frames"]
    assert got["stacks"] == want["stacks"]
    assert got["samples"] == want["samples"]
    assert got["new_iseqs"] == want["new_iseqs"] and got["new_mes"] == want["new_mes"]
    assert stats["torn"] == 0 and stats["retried"] == 0
    # the image is the program's: five threads, one deep
    assert len(want["samples"]) == 5 and max(len(s) for s in want["stacks"]) > 30


def test_an_iseq_whose_type_tag_changed_is_refused(image, tmp_path):
    # GIVEN the image with one Ruby frame's ISeq no longer an imemo (its flags' type bits changed)
    want = expected(image)
    iseq = next(i for kind, i, _, _ in want["frames"] if kind == KIND_RUBY)
    data = bytearray((image / "image.bin").read_bytes())
    data[offset_in(data, iseq, 1)] ^= 0x1f           # RBasic.flags' low bits: T_IMEMO no more
    changed = changed_image(image, tmp_path, data)
    # WHEN the sampler reads it
    stats, got = walk(changed, tmp_path)
    # THEN the threads whose stacks hold it are torn (read twice, refused), the others as before
    holders = {s for s, stack in enumerate(want["stacks"]) if any(want["frames"][f][1] == iseq for f in stack)}
    assert holders
    assert stats["torn"] == sum(1 for _, s, _ in want["samples"] if s in holders)
    assert all(f[1] != iseq for f in got["frames"])
    assert len(got["samples"]) == len(want["samples"]) - stats["torn"]


def offset_in(data: bytes, target: int, size: int = 8) -> int:
    """Where the `size` bytes at address `target` are in an image file's bytes (regions of
    address, length, bytes after an 8-byte header)."""
    at = 8
    while at < len(data):
        addr, n = struct.unpack_from("<QQ", data, at)
        if addr <= target and target + size <= addr + n:
            return at + 16 + (target - addr)
        at += 16 + n
    pytest.fail(f"the image does not hold 0x{target:x}")


def changed_image(image: Path, tmp_path: Path, data: bytes) -> Path:
    """An image directory like `image` whose memory is `data`."""
    changed = tmp_path / "changed"
    changed.mkdir()
    (changed / "image.bin").write_bytes(bytes(data))
    shutil.copy(image / "registry.gz", changed / "registry.gz")
    shutil.copy(image / "about.json", changed / "about.json")
    return changed


def image_with(image: Path, tmp_path: Path, writes: dict, regions: dict) -> Path:
    """A copy of the image with `writes` ({address: 8-byte value}) made in its memory and `regions`
    ({address: bytes}) added to it."""
    data = bytearray((image / "image.bin").read_bytes())
    for target, value in writes.items():
        struct.pack_into("<Q", data, offset_in(data, target), value)
    for addr, b in regions.items():
        data += struct.pack("<QQ", addr, len(b)) + b
    return changed_image(image, tmp_path, data)


def word_at(image: Path, target: int) -> int:
    data = (image / "image.bin").read_bytes()
    return struct.unpack_from("<Q", data, offset_in(data, target))[0]


def layout_of(image: Path, tmp_path: Path) -> dict:
    from sdb_sidecar.sampler._registry import Registry
    path = tmp_path / "registry-layout"
    with gzip.open(image / "registry.gz", "rb") as f:
        path.write_bytes(f.read())
    return Registry(str(path)).layout


def test_a_c_functions_frame_holding_a_def_methods_entry_is_refused(image, tmp_path):
    # GIVEN the image with one C function's method entry made a `def` method's (its definition
    # pointer set to a definition of a Ruby method, of this Ruby's layout): what a C frame shows
    # when its env words were read while a Ruby method's frame stood at that depth (seen: make_beta's
    # frame read as a C frame with make_alpha's entry, 3.1 --yjit under load)
    want = expected(image)
    L = layout_of(image, tmp_path)
    defs = {me: d for me, d, _ in want["new_mes"]}
    cfunc_me = next(me for kind, _, _, me in want["frames"] if kind == KIND_CFUNC)
    ruby_iseq = next(iseq for kind, iseq, _, _ in want["frames"] if kind == KIND_RUBY)
    def_at = next(cfunc_me + off for off in range(0, 40, 8) if word_at(image, cfunc_me + off) == defs[cfunc_me])
    fake_def = 0x7e0000000000                   # a definition of a `def` method, running ruby_iseq
    definition = bytearray(max(L["def_type"], L["def_iseq"]) + 8)
    definition[L["def_type"]] = L["method_type_iseq"] << L["def_type_shift"]
    struct.pack_into("<Q", definition, L["def_iseq"], ruby_iseq)
    changed = image_with(image, tmp_path, {def_at: fake_def}, {fake_def: bytes(definition)})
    # WHEN the sampler reads it
    stats, got = walk(changed, tmp_path)
    # THEN the threads whose stacks hold that C frame are torn (read twice, refused): no frame carries
    # the entry; the others are as before
    holders = {s for s, stack in enumerate(want["stacks"])
               if any(want["frames"][f][0] == KIND_CFUNC and want["frames"][f][3] == cfunc_me for f in stack)}
    assert holders
    assert stats["torn"] == sum(1 for _, s, _ in want["samples"] if s in holders)
    assert all(f[3] != cfunc_me for f in got["frames"])
    assert len(got["samples"]) == len(want["samples"]) - stats["torn"]
