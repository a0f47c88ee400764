"""Where to put the eBPF symbolizer's probes: found in the target's own Ruby, never by a fixed path.

The ELF object that holds the VM (libruby, or a ruby executable built without a shared libruby) is
the mapped file whose dynamic symbols include `rb_iseq_new_with_opt`, found through
/proc/PID/maps. Its symbols are read with pyelftools: the exported ones (.dynsym) always, the
hidden ones (.symtab) where the build kept them (Rubies built from source do; Debian's libruby is
stripped, so there only the exported compilers can be probed).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

# Functions that return a new, complete ISeq (uretprobes). Only exact names: a compiler-specialised
# copy (.isra, .constprop) may return something else.
CREATORS = (
    "rb_iseq_new_with_opt",       # the parse.y compiler: files, eval, and every child ISeq it compiles
    "rb_iseq_new_with_callback",  # ISeqs built by C code (e.g. Struct accessors)
    "pm_iseq_new_with_opt",       # the Prism compiler (3.3 opt-in, the default from 3.4): hidden
    "ibf_load_iseq",              # ISeqs loaded from binary (load_from_binary, as bootsnap does): static
)
# Called once for every ISeq compiled (parse.y, Prism, C callbacks), with the ISeq, complete but for
# its instructions' final form, as first argument: one uprobe (one trap per ISeq, not a uretprobe's
# two). Hidden (.symtab only). Where it is found, it replaces the compilers' uretprobes; binary
# loads still need ibf_load_iseq (the loader sets labels after this call).
COMPLETION = "rb_iseq_translate_threaded_code"
COVERED_BY_COMPLETION = ("rb_iseq_new_with_opt", "rb_iseq_new_with_callback", "pm_iseq_new_with_opt")
# GC compaction's object mover: gc_move(objspace, src, dest, ...). Its specialised copies keep src
# and dest as the second and third arguments (3.3.8, 3.4.5) or drop the unused objspace and take
# them first and second (4.0.5: gc_move.constprop.0.isra.0); the probe (bpf/iseq_events.c,
# iseq_moved) tells the two apart by what the registers point to, so no Ruby version decides it
# (checked by tests/integration/test_iseq_reuse.py's GC.compact test on every Ruby under test).
MOVER = "gc_move"
ANCHOR = "rb_iseq_new_with_opt"


class ProbeError(Exception):
    pass


@dataclass
class Probe:
    symbol: str        # the name in the ELF symbol table
    vaddr: int         # its address in the ELF file (before loading)
    table: str         # ".dynsym" or ".symtab"
    entry: bool = False  # True: a uprobe, the ISeq is the first argument; False: a uretprobe, it is returned
    offset: int = 0    # its offset in the file (what the kernel's uprobe takes)


@dataclass
class RubyObject:
    path: str          # as in /proc/PID/maps
    open_path: str     # the same file through /proc/PID/root (the target's mount namespace)
    has_symtab: bool
    creators: List[Probe] = field(default_factory=list)
    mover: Optional[Probe] = None
    missing: List[str] = field(default_factory=list)   # creators this build does not let us probe


def mapped_objects(pid: int) -> List[str]:
    """Distinct files mapped executable in the process, in the order of the maps."""
    seen: List[str] = []
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) < 6 or "x" not in parts[1]:
                    continue
                path = parts[5].strip()
                if path.startswith("/") and not path.endswith(" (deleted)") and path not in seen:
                    seen.append(path)
    except OSError as e:
        raise ProbeError(f"cannot read /proc/{pid}/maps: {e.strerror}") from None
    return seen


def _func_symbols(elf, section_name: str, wanted) -> Dict[str, int]:
    sec = elf.get_section_by_name(section_name)
    out: Dict[str, int] = {}
    if sec is None:
        return out
    for sym in sec.iter_symbols():
        if sym["st_info"]["type"] != "STT_FUNC" or sym["st_value"] == 0 or sym["st_shndx"] == "SHN_UNDEF":
            continue
        if wanted(sym.name):
            out.setdefault(sym.name, sym["st_value"])
    return out


def file_offset(elf, vaddr: int) -> int:
    """The file offset of an address of the ELF's image: through the loadable segment holding it."""
    for seg in elf.iter_segments():
        if seg["p_type"] == "PT_LOAD" and seg["p_vaddr"] <= vaddr < seg["p_vaddr"] + seg["p_filesz"]:
            return vaddr - seg["p_vaddr"] + seg["p_offset"]
    raise ProbeError(f"address {vaddr:#x} lies in no loadable segment")


def symbol_offset(path: str, name: str) -> int:
    """The file offset of a function exported by the ELF file at path."""
    from elftools.elf.elffile import ELFFile
    with open(path, "rb") as f:
        elf = ELFFile(f)
        found = _func_symbols(elf, ".dynsym", lambda n: n == name)
        if name not in found:
            raise ProbeError(f"{path} exports no function {name}")
        return file_offset(elf, found[name])


def _wanted(name: str) -> bool:
    if name in CREATORS or name == MOVER or name == COMPLETION:
        return True
    # gc_move.isra.0 and the like, never the .cold part
    return name.startswith(MOVER + ".") and not name.endswith(".cold") and ".cold." not in name


def find_ruby_object(pid: int) -> RubyObject:
    """The ELF object of the target's VM and the probe points it offers."""
    try:
        from elftools.elf.elffile import ELFFile
        from elftools.common.exceptions import ELFError
    except ImportError:
        raise ProbeError("pyelftools is not installed") from None
    paths = mapped_objects(pid)
    # the VM is most likely in a file named like ruby: look there first, then everywhere else
    paths.sort(key=lambda p: 0 if "ruby" in os.path.basename(p) else 1)
    for path in paths:
        open_path = f"/proc/{pid}/root{path}"
        try:
            with open(open_path, "rb") as f:
                elf = ELFFile(f)
                dyn = _func_symbols(elf, ".dynsym", lambda n: n == ANCHOR)
                if ANCHOR not in dyn:
                    continue
                has_symtab = elf.get_section_by_name(".symtab") is not None
                found: Dict[str, Tuple[int, str]] = {n: (a, ".dynsym") for n, a in
                                                     _func_symbols(elf, ".dynsym", _wanted).items()}
                if has_symtab:
                    for n, a in _func_symbols(elf, ".symtab", _wanted).items():
                        found.setdefault(n, (a, ".symtab"))
                offsets = {n: file_offset(elf, a) for n, (a, _) in found.items()}
        except (OSError, ELFError, ProbeError):
            continue
        obj = RubyObject(path=path, open_path=open_path, has_symtab=has_symtab)
        if COMPLETION in found:
            obj.creators.append(Probe(COMPLETION, *found[COMPLETION], entry=True, offset=offsets[COMPLETION]))
        for name in CREATORS:
            if COMPLETION in found and name in COVERED_BY_COMPLETION:
                continue
            if name in found:
                obj.creators.append(Probe(name, *found[name], offset=offsets[name]))
            else:
                obj.missing.append(name)
        movers = sorted(n for n in found if n == MOVER or n.startswith(MOVER + "."))
        if movers:
            obj.mover = Probe(movers[0], *found[movers[0]], offset=offsets[movers[0]])
        return obj
    raise ProbeError(f"no mapped file of process {pid} exports {ANCHOR} (is it Ruby?)")
