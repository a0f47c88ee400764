"""The layout rows of gem/ext/sdb/sdb_layouts.h, generated from each Ruby's own sources.

For each row (a Ruby minor version) `probe.c` is compiled against that Ruby's configured source
tree and run: it prints the facts (offsets, sizes, bit positions, constants) the headers give.
`row_fields` turns the facts into the row's fields, with the gem's policy for the fields the gem
uses on some Rubies only. Facts that live in a .c file are taken from that file: the test
rb_profile_frame_singleton_method_p makes (vm_backtrace.c) is compiled into the probe, and
rb_objspace's flags word is measured on gc.c itself, cut after the struct's `flags` member.

No number about Ruby is written here by hand. ROWS says which tree each row comes from and
whether the suite passed on that Ruby here (`tested`); row_fields holds the gem's policy.
"""
from __future__ import annotations

import importlib.util
import os
import sys
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
LAYOUTS_H = REPO / "gem" / "ext" / "sdb" / "sdb_layouts.h"
REGISTRY_H = REPO / "gem" / "ext" / "sdb" / "sdb_registry.h"
CACHE = Path(os.environ.get("SDB_CACHE", "/var/cache/sdb"))


def _load_decls():
    """decls.py, the generator's other half (the sidecar's declarations of sdb_registry.h)."""
    spec = importlib.util.spec_from_file_location("sdb_layoutgen_decls", HERE / "decls.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["sdb_layoutgen_decls"] = module     # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


decls = _load_decls()
NA = decls.constants(REGISTRY_H.read_text())["SDB_NA"]     # "not available": the header's SDB_NA
GENERATOR = "scripts/gen-layouts"


@dataclass(frozen=True)
class Row:
    name: str          # "3.3": RUBY_VERSION's major.minor
    tree: str          # the source tree's directory in $SDB_CACHE/src
    tag: str           # the upstream tag of those sources
    origin: str        # where the tree comes from
    tested: int        # 1: the gem's test suite passed on this Ruby here
    preview: int = 0   # 1: a Ruby not released yet (a development tree): never tested, only previewed

    @property
    def path(self) -> Path:
        return CACHE / "src" / self.tree


ROWS: List[Row] = [
    Row("3.1", "ruby-3.1.2", "v3_1_2",
        "Debian 12's ruby3.1 source package (3.1.2-7+deb12u1) with Debian's config.h: scripts/rubies --sources", 1),
    Row("3.2", "ruby-3.2.0", "v3_2_0", "git tag v3_2_0, configured here (scripts/layoutgen/tree-from-git)", 0),
    Row("3.3", "ruby-3.3.8", "v3_3_8", "scripts/rubies (Debian's ruby3.3 orig tarball)", 1),
    Row("3.4", "ruby-3.4.5", "v3_4_5", "scripts/rubies (Debian's ruby3.4 orig tarball)", 1),
    Row("4.0", "ruby-4.0.5", "v4_0_5", "scripts/rubies (ruby-4.0.5.tar.xz: the git export of tag v4_0_5, 64336ffd, or the release tarball)", 1),
    Row("4.1", "ruby-4.1.0dev-120c8fa8", "120c8fa8",
        "scripts/rubies --tarball ruby-4.1.0dev-120c8fa8.tar.xz (the git export of Ruby's master of 2026-07-28, "
        "commit 120c8fa88c22, configured with --enable-zjit): a 4.1 preview", 0, preview=1),
]


class SourceMissing(Exception):
    """A row's source tree is not on this machine."""


class ProbeFailed(Exception):
    """The probe did not compile or run against a tree."""


# ------------------------------------------------------------------ the struct's fields
def layout_sections() -> List[List[str]]:
    """The uint16_t and uint32_t fields of struct sdb_layout (sdb_registry.h) in order, without the reserved,
    in the groups its comments make."""
    text = REGISTRY_H.read_text()
    body = text[text.index("struct sdb_layout {"):]
    body = body[:body.index("\n};")]
    sections: List[List[str]] = [[]]
    for line in body.splitlines():
        if re.match(r"^    /\*", line) and sections[-1]:
            sections.append([])
        m = re.match(r"^\s*uint(?:16|32)_t (\w+);", line)
        if m and not m.group(1).startswith("reserved"):
            sections[-1].append(m.group(1))
    return [s for s in sections if s]


def layout_fields() -> List[str]:
    return [f for section in layout_sections() for f in section]


# ------------------------------------------------------------------ reading the sources
def arch_include(tree: Path) -> Path:
    found = sorted((tree / ".ext" / "include").glob("*/ruby/config.h"))
    if not found:
        raise SourceMissing(f"{tree} is not configured (no .ext/include/<arch>/ruby/config.h)")
    return found[0].parent.parent


def struct_body(text: str, head: str) -> str:
    """The text between the braces of the first `head {` (braces matched)."""
    i = text.find(head)
    if i < 0:
        return ""
    i = text.index("{", i)
    depth = 0
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i + 1:j]
    return ""


def features(tree: Path) -> Dict[str, str]:
    """-D defines for what a C file cannot ask with #ifdef: struct members and enum constants."""
    vm_core = (tree / "vm_core.h").read_text(errors="replace")
    classext = struct_body((tree / "internal" / "class.h").read_text(errors="replace"),
                           "struct rb_classext_struct")
    out = {}
    if re.search(r"\bBUILTIN_ATTR_C_TRACE\b", vm_core):
        out["SDB_HAVE_BUILTIN_ATTR_C_TRACE"] = "1"
    if re.search(r"\bVALUE classpath;", classext):
        out["SDB_HAVE_CLASSEXT_CLASSPATH"] = "1"
    if re.search(r"\biv_tbl;", classext):
        out["SDB_HAVE_CLASSEXT_IV_TBL"] = "1"
    if re.search(r"\b_iseq;", struct_body(vm_core, "typedef struct rb_control_frame_struct")):
        out["SDB_HAVE_CFP_UNDERSCORE_ISEQ"] = "1"
    zjit_h = tree / "zjit.h"
    if zjit_h.is_file() and re.search(r"\} zjit_jit_frame_t;", zjit_h.read_text(errors="replace")):
        out["SDB_HAVE_ZJIT_JIT_FRAME"] = "1"
    out["SDB_SINGLETON_TEST"] = singleton_test(tree)
    return out


def singleton_test(tree: Path) -> str:
    """The expression rb_profile_frame_singleton_method_p returns (vm_backtrace.c), on `klass`."""
    src = (tree / "vm_backtrace.c").read_text(errors="replace")
    body = struct_body(src, "\nrb_profile_frame_singleton_method_p(VALUE frame)")
    m = re.search(r"VALUE klass = frame2klass\(frame\);\s*return (.*?);\s*$", body, re.S)
    if not m:
        raise ProbeFailed(f"{tree}/vm_backtrace.c: rb_profile_frame_singleton_method_p is not "
                          "`klass = frame2klass(frame); return ...;`: read it and teach singleton_test")
    return " ".join(m.group(1).split())


def internal_path_c_trace(tree: Path) -> int:
    """1 where Ruby's backtraces show every frame of an ISeq of its own internal .rb files (a path
    beginning with `<internal:`) as a C method's: labelled by its method entry and located at its
    Ruby caller (vm_backtrace.c: `location_cfunc_p` and `rb_ec_partial_backtrace_object` both ask
    `is_internal_location`, 4.0); 0 where neither does (3.4 asks BUILTIN_ATTR_C_TRACE; before, they
    are Ruby frames). The prefix must be the registry's SDB_INTERNAL_PATH_PREFIX, which readers use."""
    src = (tree / "vm_backtrace.c").read_text(errors="replace")
    label = "is_internal_location(" in struct_body(src, "\nlocation_cfunc_p(rb_backtrace_location_t *loc)")
    walk = struct_body(src, "\nrb_ec_partial_backtrace_object(")
    place = bool(re.search(r"bool internal = is_internal_location\((?:cfp->iseq|CFP_ISEQ\(cfp\))\);", walk)
                 and re.search(r"if \(internal\) \{[^}]*backpatch_counter\+\+;", walk))
    if label != place:
        raise ProbeFailed(f"{tree}/vm_backtrace.c: an internal frame is {'' if label else 'not '}labelled as a "
                          f"C method but {'' if place else 'not '}located as one: read location_cfunc_p and "
                          "rb_ec_partial_backtrace_object and teach internal_path_c_trace")
    if not label:
        return 0
    m = re.search(r"^is_internal_location\([^)]*\)\s*\{\s*static const char prefix\[\] = (\"[^\"]*\");", src, re.M)
    want = decls.constants(REGISTRY_H.read_text())["SDB_INTERNAL_PATH_PREFIX"]
    if not m or decls.literal("prefix", m.group(1)) != want:
        raise ProbeFailed(f"{tree}/vm_backtrace.c: is_internal_location's prefix is not {want!r} "
                          "(SDB_INTERNAL_PATH_PREFIX in sdb_registry.h): read it and teach internal_path_c_trace")
    return 1


def compile_and_run(tree: Path, source: Path, defines: Dict[str, str], workdir: Path) -> str:
    exe = workdir / (source.stem + ".out")
    # probes.h is generated by make; the dummy Ruby's own build uses when there is no dtrace
    (workdir / "probes.h").write_text('#include "probes.dmyh"\n')
    cmd = ["gcc", "-std=gnu99", "-w", "-O1", "-fno-pie", "-no-pie", "-ffunction-sections", "-fdata-sections", f"-I{workdir}", f"-I{tree}", f"-I{tree / 'include'}",
           f"-I{arch_include(tree)}", "-DRUBY_EXPORT"]
    cmd += [f"-D{k}={v}" for k, v in defines.items()]
    # Ruby's inline functions name functions of libruby the probe never calls: nothing to link
    cmd += [str(source), "-o", str(exe), "-Wl,--gc-sections", "-Wl,--unresolved-symbols=ignore-all"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise ProbeFailed(f"compiling {source.name} against {tree} failed:\n{done.stderr[-3000:]}")
    run = subprocess.run([str(exe)], capture_output=True, text=True)
    if run.returncode:
        raise ProbeFailed(f"{source.name} against {tree} failed: {run.stderr}")
    return run.stdout


def objspace_facts(tree: Path, workdir: Path) -> Dict[str, int]:
    """rb_objspace: the offset of its flags, the bits of during_gc and dont_gc and of the mode (the
    mask, and its value while a sweep is in progress), and the offset of profile.count (the GCs
    started: rb_gc_count), on gc.c itself cut after the struct (everything gc.c defines before it,
    none of what follows)."""
    gc = (tree / "gc.c").read_text(errors="replace")
    start = gc.find("typedef struct rb_objspace {")
    end = gc.find("} rb_objspace_t;", start)
    if start < 0 or end < 0:
        raise ProbeFailed(f"{tree}/gc.c: no `typedef struct rb_objspace {{ ... }} rb_objspace_t;`")
    cut = gc[:end] + "} rb_objspace_t_head;"
    probe = workdir / "objspace_probe.c"
    probe.write_text(cut + r"""
#include <stdio.h>
static int sdb_bit(const rb_objspace_t_head *z) {
    unsigned int w; memcpy(&w, (const char *)z + offsetof(rb_objspace_t_head, flags), sizeof w);
    return w ? __builtin_ctz(w) : -1;
}
static unsigned int sdb_word(const rb_objspace_t_head *z) {
    unsigned int w; memcpy(&w, (const char *)z + offsetof(rb_objspace_t_head, flags), sizeof w);
    return w;
}
int main(void) {
    static rb_objspace_t_head z;
    printf("objspace_flags %lu\n", (unsigned long)offsetof(rb_objspace_t_head, flags));
    memset(&z, 0, sizeof z); z.flags.during_gc = 1; printf("gc_during_bit %d\n", sdb_bit(&z));
    memset(&z, 0, sizeof z); z.flags.dont_gc = 1; printf("gc_dont_gc_bit %d\n", sdb_bit(&z));
    memset(&z, 0, sizeof z); z.flags.mode = ~0u; printf("gc_mode_mask %u\n", sdb_word(&z));
    memset(&z, 0, sizeof z); z.flags.mode = gc_mode_sweeping; printf("gc_mode_sweeping %u\n", sdb_word(&z));
    printf("objspace_count %lu\n", (unsigned long)offsetof(rb_objspace_t_head, profile.count));
    return 0;
}
""")
    out = compile_and_run(tree, probe, {}, workdir)
    return {k: int(v) for k, v in (line.split() for line in out.splitlines())}


def source_piece(tree: Path, file: str, pattern: str) -> str:
    """The text of `file` that `pattern` (a regex, re.S|re.M) matches: a definition a .c file keeps
    to itself, to be compiled into the probe as Ruby wrote it."""
    m = re.search(pattern, (tree / file).read_text(errors="replace"), re.S | re.M)
    if not m:
        raise ProbeFailed(f"{tree}/{file}: no match for {pattern!r}: read it and teach cfile_facts")
    return m.group(0)


def cfile_facts(tree: Path, workdir: Path) -> Dict[str, int]:
    """Facts Ruby keeps inside .c files, from those files' own definitions compiled here:
    st.c's st_table_entry, symbol.c's ID chunks (an Array of pairs; 4.1: a T_DATA of darray.h's
    rb_darray of struct sym_id_entry) (and rb_symbols_t where symbol.h has none, 4.0),
    iseq.c's succinct line index (struct succ_index_table and its rank macros)."""
    symbols_in_h = "} rb_symbols_t;" in (tree / "symbol.h").read_text(errors="replace")
    # 4.1: a chunk of the ID table is a T_DATA wrapping an rb_darray of struct sym_id_entry
    # {sym, str}; before, an Array of [str, sym] pairs (enum id_entry_type)
    darray_chunks = "struct sym_id_entry {" in (tree / "symbol.c").read_text(errors="replace")
    entries = [
        source_piece(tree, "darray.h", r"^typedef struct rb_darray_meta \{.*?\} rb_darray_meta_t;"),
        source_piece(tree, "symbol.c", r"^struct sym_id_entry \{.*?\};"),
        "typedef struct { rb_darray_meta_t meta; struct sym_id_entry data[]; } sdb_id_chunk;",
        "#define ID_ENTRY_SIZE (sizeof(struct sym_id_entry) / sizeof(VALUE))",
        "#define ID_ENTRY_STR (offsetof(struct sym_id_entry, str) / sizeof(VALUE))",
    ] if darray_chunks else [source_piece(tree, "symbol.c", r"^enum id_entry_type \{.*?\};")]
    pieces = [
        source_piece(tree, "st.c", r"^typedef \w+ st_hash_t;"),
        source_piece(tree, "st.c", r"^struct st_table_entry \{.*?\};"),
        source_piece(tree, "symbol.c", r"^(static const int ID_ENTRY_UNIT = \d+;|#define ID_ENTRY_UNIT \d+)"),
        *entries,
        '#include "symbol.h"' if symbols_in_h else
        source_piece(tree, "symbol.c", r"^typedef struct \{[^{}]*\} rb_symbols_t;"),
        source_piece(tree, "iseq.c", r"^#define IMMEDIATE_TABLE_SIZE .*?$"),
        source_piece(tree, "iseq.c", r"^struct succ_index_table \{.*?\n\};"),
        source_piece(tree, "iseq.c", r"^#define imm_block_rank_set.*?$"),
        source_piece(tree, "iseq.c", r"^#define small_block_rank_set.*?$"),
    ]
    probe = workdir / "cfile_probe.c"
    probe.write_text("""#include "ruby/ruby.h"
#include "ruby/st.h"
#include "ruby/atomic.h"
#include "internal/compilers.h"
#include "id.h"
#include <stddef.h>
#include <stdio.h>
""" + "\n".join(pieces) + r"""
#define P(name, v) printf("%s %lu\n", name, (unsigned long)(v))
static int bit(uint64_t v) { return v ? __builtin_ctzll(v) : -1; }
int main(void) {
    struct succ_index_table *t = 0;
    uint64_t v = 0, w = 0;
    P("st_entry_size", sizeof(struct st_table_entry));
    P("st_entry_key", offsetof(struct st_table_entry, key));
    P("st_entry_record", offsetof(struct st_table_entry, record));
    P("id_entry_unit", ID_ENTRY_UNIT);
    P("id_entry_size", ID_ENTRY_SIZE);
    P("id_entry_str", ID_ENTRY_STR);
    P("symbols_ids", offsetof(rb_symbols_t, ids));
#ifdef SDB_ID_CHUNK_DATA
    P("id_chunk_data", offsetof(struct RTypedData, data));
    P("id_chunk_len", offsetof(sdb_id_chunk, meta.size));
    P("id_chunk_entries", offsetof(sdb_id_chunk, data));
#endif
    P("succ_imm_entries", IMMEDIATE_TABLE_SIZE);
    P("succ_imm_per_word", IMMEDIATE_TABLE_SIZE / (sizeof t->imm_part / sizeof t->imm_part[0]));
    imm_block_rank_set(v, 1, 1);
    P("succ_imm_bits", bit(v));
    P("succ_part", offsetof(struct succ_index_table, succ_part));
    P("succ_block_size", sizeof(struct succ_dict_block));
    P("succ_block_positions", sizeof t->succ_part[0].bits * 8);
    P("succ_block_rank", offsetof(struct succ_dict_block, rank));
    P("succ_block_small_ranks", offsetof(struct succ_dict_block, small_block_ranks));
    small_block_rank_set(w, 2, 1);
    P("succ_small_bits", bit(w));
    P("succ_block_bits", offsetof(struct succ_dict_block, bits));
    return 0;
}
""")
    out = compile_and_run(tree, probe, {"SDB_ID_CHUNK_DATA": "1"} if darray_chunks else {}, workdir)
    facts = {k: int(v) for k, v in (line.split() for line in out.splitlines())}
    for name in ("id_chunk_data", "id_chunk_len", "id_chunk_entries"):
        facts.setdefault(name, NA)      # an Array chunk: no such words
    return facts


def probe_tree(tree: Path) -> Dict[str, object]:
    """The raw facts of one tree: {name: int | None (not in this Ruby) | tuple}."""
    if not (tree / "vm_core.h").is_file():
        raise SourceMissing(f"no Ruby source tree at {tree}")
    facts: Dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="sdb-layoutgen-") as tmp:
        out = compile_and_run(tree, HERE / "probe.c", features(tree), Path(tmp))
        for line in out.splitlines():
            name, *vals = line.split()
            if name == "ruby_api_version":
                facts[name] = tuple(int(x) for x in vals[0].split("."))
            elif vals == ["na"]:
                facts[name] = None
            elif len(vals) == 1:
                facts[name] = int(vals[0])
            else:
                facts[name] = tuple(vals)
        facts.update(cfile_facts(tree, Path(tmp)))
        facts["internal_path_c_trace"] = internal_path_c_trace(tree)
        if facts["ruby_api_version"] < (3, 2):
            facts.update(objspace_facts(tree, Path(tmp)))
    return facts


# ------------------------------------------------------------------ facts -> row
def row_fields(facts: Dict[str, object]) -> Dict[str, int]:
    """The row's fields from a tree's facts. The gem's policy decides the fields it uses on some
    Rubies only (SDB_NA elsewhere), as its own #if do:
      - th->status and rb_objspace.flags: only before 3.2, where no thread event hook says when a
        thread waits and the gem hooks no GC (sdb_threads.c, sdb_check.c: sdb_find_gc_words);
      - the class's ivar table (class_ext_ptr, classext_iv_tbl): only where the class path is an
        ivar, i.e. rb_classext_t has no classpath (sdb_check.c: sdb_check_classes)."""
    f = dict(facts)
    old = f["ruby_api_version"] < (3, 2)
    row: Dict[str, int] = {}
    for name in layout_fields():
        if name in f and isinstance(f[name], int):
            row[name] = f[name]
        elif name in f and f[name] is None:
            row[name] = NA
    byte, shift, mask = (int(x) for x in f["thread_status_bits"])
    row.update(thread_status=byte, thread_status_shift=shift, thread_status_mask=mask)
    if not old:
        row.update(thread_status=NA, thread_status_shift=NA, thread_status_mask=NA)
        row.update(objspace_flags=NA, gc_during_bit=NA, gc_dont_gc_bit=NA, gc_mode_mask=NA, gc_mode_sweeping=NA,
                   objspace_count=NA)
    row["rstring_heap_ptr"] = word(f, "rstring_heap_ptr_at", "pointer")
    row["rstring_heap_len"] = word(f, "rstring_heap_len_at", "pointer")
    row["rstring_embed_ary"] = word(f, "rstring_embed_ary_at", "embedded")
    if f["rstring_embed_len_at"][0] == "pointer":   # a word of the string
        row["rstring_embed_len"] = int(f["rstring_embed_len_at"][1])
        row["rstring_embed_len_shift"] = row["rstring_embed_len_mask"] = NA
    else:                                           # in the flags
        row["rstring_embed_len"] = NA
        row["rstring_embed_len_shift"] = f["rstring_flags_len_shift"]
        row["rstring_embed_len_mask"] = f["rstring_flags_len_mask"]
        if row["rstring_embed_len_shift"] is None:
            raise ProbeFailed("an embedded string's length is neither a word nor in the flags")
    byte, shift, mask = (int(x) for x in f["def_type_bits"])
    row.update(def_type=byte, def_type_shift=shift, def_type_mask=mask)
    kind, off = f["rclass_super_at"]
    if kind == "unknown":
        raise ProbeFailed("RCLASS_SUPER reads neither a word of the class nor of its classext")
    row["rclass_super"] = int(off)
    kind, off = f["class_ext"]
    row["class_ext"] = int(off) if kind == "embedded" else NA
    row["class_ext_ptr"] = int(off) if kind == "pointer" else NA
    for field, fact in (("classext_classpath", "class_classpath"),
                        ("classext_attached_object", "class_attached_object")):
        got = f.get(fact)
        row[field] = int(got[1]) if got and got[0] == "embedded" else NA
    if row["classext_classpath"] != NA or row["class_ext_ptr"] == NA:
        row["class_ext_ptr"] = row["classext_iv_tbl"] = NA
    missing = [n for n in layout_fields() if n not in row]
    if missing:
        raise ProbeFailed(f"no fact for {', '.join(missing)}: add it to probe.c (and row_fields)")
    return row


def word(facts: Dict[str, object], name: str, kind: str) -> int:
    """The offset a `where` fact found, which must be of the kind expected."""
    got = facts[name]
    if got[0] != kind:
        raise ProbeFailed(f"{name}: expected {kind}, the probe found {got[0]} {got[1]}")
    return int(got[1])


# ------------------------------------------------------------------ the rows in use
def rows_in_use(header: Path = LAYOUTS_H) -> Dict[str, Dict[str, object]]:
    """The rows of a sdb_layouts.h as the compiler reads them: {name: {field: value, "source": str,
    "tested": int}}. Compiled, not parsed, so what is compared is what the gem uses."""
    fields = layout_fields()
    prints = "".join(f'        printf(" {f}=%u", (unsigned)r->layout.{f});\n' for f in fields)
    with tempfile.TemporaryDirectory(prefix="sdb-layoutrows-") as tmp:
        src = Path(tmp) / "rows.c"
        src.write_text(f"""#include <stdio.h>
#include "{header.name}"
int main(void) {{
    for (unsigned i = 0; i < SDB_LAYOUT_ROW_COUNT; i++) {{
        const struct sdb_layout_row *r = &sdb_layout_rows[i];
        printf("%s\\t%d\\t%d\\t%s\\t", r->name, r->tested, r->preview, r->source);
{prints}        printf(" global_symbols_addr=%llu\\n", (unsigned long long)r->layout.global_symbols_addr);
    }}
    return 0;
}}
""")
        exe = Path(tmp) / "rows"
        done = subprocess.run(["gcc", "-std=gnu99", f"-I{header.parent}", f"-I{REGISTRY_H.parent}",
                               str(src), "-o", str(exe)], capture_output=True, text=True)
        if done.returncode:
            raise ProbeFailed(f"{header} does not compile:\n{done.stderr[-3000:]}")
        out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    rows: Dict[str, Dict[str, object]] = {}
    for line in out.splitlines():
        name, tested, preview, source, values = line.split("\t")
        row: Dict[str, object] = {"tested": int(tested), "preview": int(preview), "source": source}
        for item in values.split():
            k, v = item.split("=")
            row[k] = int(v)
        rows[name] = row
    return rows


def differences(generated: Dict[str, int], in_use: Dict[str, object]) -> List[str]:
    """`field: in use X, generated Y` for every field that differs."""
    return [f"{k}: in use {fmt(in_use.get(k))}, generated {fmt(v)}"
            for k, v in generated.items() if in_use.get(k) != v]


def fmt(v: object) -> str:
    return "SDB_NA" if v == NA else str(v)


# ------------------------------------------------------------------ writing sdb_layouts.h
HEADER = """\
/**********************************************************************
 * sdb_layouts.h - THE table of Ruby-version facts (one row per minor).
 *
 * GENERATED by scripts/gen-layouts from each Ruby's own source tree: do not edit; change
 * scripts/layoutgen/ (probe.c, gen.py) and run it again (docs/new-ruby-version.md).
 * Every field is read from that Ruby's headers by a probe compiled against them (offsetof,
 * sizeof, bit-field positions, the headers' own enums and macros), rb_objspace's flags from
 * gc.c, singleton_any_type from what rb_profile_frame_singleton_method_p (vm_backtrace.c)
 * returns; docs/ruby-internals.md says what each fact means. SDB_NA: not in that Ruby, or not
 * used by the gem on it. A row is checked at require against Ruby's own rb_profile_frames
 * (sdb_check.c: sdb_check_layout), so a wrong row is refused, not trusted.
 * tests/integration/test_layout_rows_generated.py regenerates the tested rows and compares.
 *
 * Bit fields: rstring_noembed_bit, rarray_embed_bit and fl_singleton_bit
 * are bit NUMBERS in RBasic.flags (13 means 1 << 13).
 **********************************************************************/
#ifndef SDB_LAYOUTS_H
#define SDB_LAYOUTS_H 1

#include "sdb_registry.h"

struct sdb_layout_row {
    const char *name;   /* "3.3": matched against RUBY_VERSION major.minor */
    const char *source; /* the Ruby sources the row was generated from */
    int tested;         /* 1: the gem's test suite passed on this Ruby here */
    int preview;        /* 1: a Ruby not released yet, its row from a development tree (never tested) */
    struct sdb_layout layout;
};

static const struct sdb_layout_row sdb_layout_rows[] = {
"""
FOOTER = """\
};

#define SDB_LAYOUT_ROW_COUNT (sizeof(sdb_layout_rows) / sizeof(sdb_layout_rows[0]))

#endif /* SDB_LAYOUTS_H */
"""
HEX = ("thread_status_mask", "rstring_embed_len_mask", "rarray_embed_len_mask", "qnil", "t_mask", "imemo_mask",
       "def_type_mask", "env_flag_local", "env_prev_tag_mask", "immediate_mask", "frame_flag_finish", "builtin_attr_c_trace", "builtin_attr_leaf") + tuple(
    f"frame_magic_{m}" for m in ("mask", "method", "top", "cfunc", "ifunc", "eval", "dummy"))


def source_of(row: Row, facts_from_gc: bool) -> str:
    files = ("vm_core.h, iseq.h, method.h, id.h, internal/class.h, internal/imemo.h, include/ruby/internal/, "
             "include/ruby/st.h, vm_backtrace.c, st.c, symbol.c, iseq.c")
    if facts_from_gc:
        files += ", gc.c"
    return f"generated by {GENERATOR} from {row.tag} ({files}); {row.origin}"


def row_text(row: Row, fields: Dict[str, int], source: str) -> str:
    lines = []
    for section in layout_sections():
        line = ""
        for name in section:
            v = fields[name]
            item = f".{name} = " + ("SDB_NA" if v == NA else hex(v) if name in HEX else str(v))
            if line and len(line) + len(item) + 2 > 96:
                lines.append(line + ",")
                line = ""
            line = f"{line}, {item}" if line else item
        lines.append(line + ",")
    lines.append(".global_symbols_addr = 0,")
    body = "\n".join("            " + x for x in lines)
    tested = "1, /* the gem's test suite passed on it here */" if row.tested else "0, /* not tested here */"
    preview = "1, /* PREVIEW: a Ruby not released yet */" if row.preview else "0,"
    return (f"    /* row {row.name} */\n    {{\n        \"{row.name}\",\n        \"{c_string(source)}\",\n"
            f"        {tested}\n        {preview}\n        {{\n{body}\n        }},\n    }},\n")


def c_string(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"')


def kept_row(text: str, name: str) -> Optional[str]:
    """A row's block in a generated sdb_layouts.h, as it is, brought up to the struct: a row written
    before `preview` existed gets `0,`, and a field the struct gained since gets SDB_NA (the row's
    Ruby was not read for it: the gem and the sidecar use no SDB_NA field)."""
    start = text.find(f"    /* row {name} */\n")
    if start < 0:
        return None
    end = text.index("\n    },\n", start) + len("\n    },\n")
    block = text[start:end]
    lines = block.split("\n")
    if not any(re.match(r"^        [01], /\* PREVIEW|^        [01],$", x) for x in lines):
        at = next(i for i, x in enumerate(lines) if re.match(r"^        [01], /\* (the gem|not tested)", x))
        lines.insert(at + 1, "        0,")
    missing = [f for f in layout_fields() if f".{f} = " not in block]
    if missing:
        at = next(i for i, x in enumerate(lines) if ".global_symbols_addr = " in x)
        lines.insert(at, "            " + ", ".join(f".{f} = SDB_NA" for f in missing) + ",")
    return "\n".join(lines)


def write_header(only: Optional[List[str]] = None, log=print) -> str:
    """The whole sdb_layouts.h: rows whose tree is here regenerated, the others kept as they are but
    for fields the struct gained since (kept_row) (a tested row is never kept: its tree must be here)."""
    current = LAYOUTS_H.read_text() if LAYOUTS_H.exists() else ""
    parts = [HEADER]
    for row in ROWS:
        kept = kept_row(current, row.name)
        if (only is not None and row.name not in only) and kept:
            parts.append(kept)
            continue
        try:
            facts = probe_tree(row.path)
        except SourceMissing as e:
            if row.tested or not kept:
                raise
            log(f"gen-layouts: row {row.name} kept (new fields SDB_NA): {e}")
            parts.append(kept)
            continue
        source = source_of(row, "objspace_flags" in facts)
        parts.append(row_text(row, row_fields(facts), source))
        log(f"gen-layouts: row {row.name} generated from {row.path}")
    parts.append(FOOTER)
    return "".join(parts)
