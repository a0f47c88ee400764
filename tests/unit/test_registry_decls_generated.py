"""The sidecar's declarations of the registry are generated from the header the gem compiles.

gem/ext/sdb/sdb_registry.h is the one definition of the registry. scripts/gen-layouts
(scripts/layoutgen/decls.py) writes from it sidecar/sdb_sidecar/sampler/_registry_h.pxd (every struct with
every member, every integer constant, for Cython) and symbolizer/sdb_trace/registry_h.py (the
constants' values, for Python). These tests prove the committed files are what the header gives
now (a member left out of the .pxd, or added to the header and not regenerated, fails here), that
the parser reads every member the C compiler sees and every value as the compiler reads it, and
that what the header defines is written nowhere else by hand.
"""
from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("sdb_layoutgen_decls", REPO / "scripts" / "layoutgen" / "decls.py")
decls = importlib.util.module_from_spec(_spec)
sys.modules["sdb_layoutgen_decls"] = decls   # dataclasses look their module up by name
_spec.loader.exec_module(decls)

CC = shutil.which("cc") or shutil.which("gcc")
HEADER = decls.REGISTRY_H.read_text()


def test_the_committed_declarations_are_what_sdb_registry_h_generates():
    stale = decls.stale()
    assert not stale, (f"{', '.join(str(p.relative_to(REPO)) for p in stale)}: not what "
                       "gem/ext/sdb/sdb_registry.h gives: run `scripts/gen-layouts --decls`")


def test_every_member_of_struct_sdb_layout_is_declared_in_the_pxd_in_order():
    layout = next(s for s in decls.structs(HEADER) if s.name == "sdb_layout")
    pxd = decls.PXD.read_text()
    body = pxd[pxd.index("    struct sdb_layout:\n"):].split("\n\n", 1)[0].splitlines()[1:]
    declared = [line.split()[-1] for line in body]
    assert declared == [m.name + (f"[{m.dim}]" if m.dim else "") for m in layout.members]
    assert len(layout.members) > 150     # the row's facts, the reserved words, the addresses found at require


def test_the_rows_generator_and_the_declarations_read_the_same_fields():
    """gen.py writes the rows of sdb_layouts.h for the uint16/uint32 fields it reads from the same
    header: every one of them, in order, is what decls.py declares (the reserved words aside)."""
    spec = importlib.util.spec_from_file_location("sdb_layoutgen", REPO / "scripts" / "layoutgen" / "gen.py")
    gen = importlib.util.module_from_spec(spec)
    sys.modules["sdb_layoutgen"] = gen
    spec.loader.exec_module(gen)
    layout = next(s for s in decls.structs(HEADER) if s.name == "sdb_layout")
    assert gen.layout_fields() == [m.name for m in layout.members
                                   if m.type in ("uint16_t", "uint32_t") and not m.name.startswith("reserved")]
    assert gen.NA == 0xFFFF      # SDB_NA as the header defines it (the gem's test reads 0xffff too)


def test_a_member_added_to_the_header_needs_the_declarations_regenerated(tmp_path):
    # GIVEN the header with one more field in struct sdb_layout (as a new Ruby fact would add)
    header = tmp_path / "sdb_registry.h"
    header.write_text(HEADER.replace("    uint16_t rbasic_klass;", "    uint16_t rbasic_klass;\n    uint16_t new_fact;"))
    # THEN the generated .pxd declares it, and the committed one is out of date
    assert "        uint16_t new_fact\n" in decls.outputs(header)[decls.PXD]
    assert decls.PXD in decls.stale(header)


def test_a_member_left_out_of_the_pxd_is_found():
    # GIVEN the committed .pxd with one field of struct sdb_layout taken out
    text = decls.PXD.read_text()
    cut = text.replace("        uint16_t cfp_sp\n", "", 1)
    assert cut != text
    # THEN it is not what the header generates
    assert cut != decls.outputs()[decls.PXD]


@pytest.mark.parametrize("member", ["uint16_t a : 4;", "uint16_t a, b;", "union { uint64_t a; } u;",
                                    "#if X\n    uint16_t a;\n#endif", "double a;"])
def test_a_member_the_generator_cannot_declare_stops_it(member):
    header = "#ifndef G\n#define G 1\nstruct s {\n    uint16_t first;\n    " + member + "\n};\n#endif\n"
    with pytest.raises(decls.DeclError):
        decls.render_pxd(header)


def test_a_constant_the_generator_cannot_read_stops_it():
    with pytest.raises(decls.DeclError):
        decls.constants("#define SDB_X (1u << 3)\n")


@pytest.mark.skipif(CC is None, reason="no C compiler (cc) on this machine")
def test_the_parser_sees_every_member_and_value_the_compiler_sees(tmp_path):
    """Compiled against the header: each struct's members, as parsed, lie one after the other with
    no room left between them but alignment padding, and end where the struct ends; every constant's
    value in registry_h.py is the compiler's."""
    from sdb_trace import registry_h
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "sdb_registry.h"', "int main(void) {"]
    for s in decls.structs(HEADER):
        lines.append(f'    printf("struct {s.name} %zu %zu\\n", sizeof(struct {s.name}), _Alignof(struct {s.name}));')
        for m in s.members:
            ref = f"((struct {s.name} *)0)->{m.name}"
            lines.append(f'    printf("member {m.name} %zu %zu %zu\\n", offsetof(struct {s.name}, {m.name}), '
                         f"sizeof({ref}), _Alignof(__typeof__({ref})));")
    for name, v in decls.constants(HEADER).items():
        if isinstance(v, int):
            lines.append(f'    printf("const {name} %llu\\n", (unsigned long long)({name}));')
        else:
            lines.append(f'    printf("const {name}"); for (size_t i = 0; i < sizeof({name}) - 1; i++) '
                         f'printf(" %u", (unsigned char){name}[i]); printf("\\n");')
    lines.append("    return 0;\n}\n")
    src = tmp_path / "members.c"
    src.write_text("\n".join(lines))
    exe = tmp_path / "members"
    subprocess.run([CC, "-std=gnu11", f"-I{decls.REGISTRY_H.parent}", str(src), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()

    structs = {}
    for line in out:
        kind, name, *nums = line.split()
        if kind == "struct":
            current = structs[name] = {"size": int(nums[0]), "align": int(nums[1]), "members": []}
        elif kind == "member":
            current["members"].append((name, *map(int, nums)))
        else:
            assert kind == "const"
            want = getattr(registry_h, name)
            got = int(nums[0]) if isinstance(want, int) else "".join(chr(int(b)) for b in nums)
            assert want == got, f"registry_h.{name} is {want!r}, the compiler reads {got!r}"
    assert set(structs) >= {"sdb_layout", "sdb_slot", "sdb_span_event", "sdb_header"}
    for name, s in structs.items():
        end = 0
        for member, offset, size, align in s["members"]:
            expect = -(-end // align) * align
            assert offset == expect, f"struct {name}: {member} at {offset}, not {expect}: a member before it was not parsed"
            end = offset + size
        assert s["size"] == -(-end // s["align"]) * s["align"], f"struct {name}: members end at {end} of {s['size']}"


def tracked(*dirs: str):
    out = subprocess.run(["git", "-C", str(REPO), "ls-files", "--", *dirs], capture_output=True, text=True,
                         check=True).stdout.split()
    return [REPO / f for f in out if Path(f).suffix in {".c", ".h", ".py", ".pyx", ".pxd"}]


_NAMES = (r"(?:SDB_)?(?:STATE_(?:UNKNOWN|RUNNING|GVL_WAIT|BLOCKED)|REGISTRY_VERSION|STATUS_(?:STARTING|ENABLED|DISABLED)"
          r"|SPAN_BEGIN|SPAN_END|KIND_(?:REQUEST|JOB|LABEL))")
# (pattern, what the header calls it): 0xffff given a name or compared with (not a msgpack bound,
# not a BTF bit-field, not the sampler's own IMEMO_NONE), a registry constant given a number
BY_HAND = [
    (re.compile(r"(?:NA\s*=|[!=]=)\s*0x[fF]{4}\b"), "SDB_NA (not available)"),
    (re.compile(r"SDBREG"), "SDB_REGISTRY_MAGIC"),
    (re.compile(r"[\"']/dev/shm/sdb-"), "SDB_REGISTRY_PREFIX"),
    (re.compile(rf"^\s*(?:#define\s+)?[\w, ]*\b{_NAMES}\b[\w, ]*(?:=|\s)\s*\(?\s*\d"),
     "a registry constant (a thread state, a status, a span event or kind) given a number"),
    (re.compile(r"\b1\s*:\s*[\"']request"), "the span kinds (SDB_KIND_*) by number"),
]
GENERATED = {decls.PXD, decls.PY, decls.REGISTRY_H}


def by_hand_in(path: Path, text: str):
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        if "IMEMO_NONE" in line:      # the sampler's own "not an imemo", not the layout's SDB_NA
            continue
        for pattern, what in BY_HAND:
            if pattern.search(line):
                found.append(f"{path}:{n}: {what}: {line.strip()}")
    return found


def test_what_the_header_defines_is_written_nowhere_else_by_hand():
    files = [f for f in tracked("sidecar", "symbolizer", "bpf") if f not in GENERATED]
    assert len(files) > 30, f"only {len(files)} source files found: is this a git checkout?"
    found = [hit for f in files for hit in by_hand_in(f.relative_to(REPO), f.read_text(errors="replace"))]
    assert not found, ("written by hand instead of taken from sdb_registry.h (sdb_trace.registry_h in Python, "
                       "_registry_h.pxd in Cython):\n" + "\n".join(found))


@pytest.mark.parametrize("line", [
    "NA = 0xFFFF", "    LAYOUT_NA = 0xffff          # SDB_NA", "#if RSTR_EMBED_LEN == 0xffff",
    "        if self.L.thread_status != 0xffff and x:", 'MAGIC = b"SDBREG\\0\\0"', 'REGISTRY_PREFIX = "/dev/shm/sdb-"',
    "REGISTRY_VERSION = 3", "STATUS_STARTING, STATUS_ENABLED, STATUS_DISABLED = 0, 1, 2", "    STATE_GVL_WAIT = 2",
    "STATE_UNKNOWN = 0", "#define SDB_STATE_BLOCKED 3", "SPAN_BEGIN, SPAN_END = 1, 2",
    'SPAN_KINDS = {1: "request", 2: "job", 3: "label"}'])
def test_the_check_finds_a_copy_put_back(line):
    """Each way these were written by hand before the declarations were generated is found."""
    assert by_hand_in(Path("put_back.py"), f"x = 1\n{line}\n")
