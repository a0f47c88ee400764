"""The sidecar's folders are layers, and calls go down: a module imports only from its own layer or
from a layer below it (LAYERS), and no modules import each other in a cycle, within a layer or
across. Every import counts, wherever it is written (in a function, under TYPE_CHECKING, a Cython
cimport): each is a dependency a reader must follow."""
from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Dict, List, Set, Tuple

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "sidecar" / "sdb_sidecar"

# Each layer and the layers directly below it (those it may import, and what they may import in
# turn). "package" is sdb_sidecar/__init__.py (its __version__); "errors" is errors.py, the one
# exception type of every layer; "cli" is cli.py, the top.
LAYERS: Dict[str, Set[str]] = {
    "package": set(),
    "errors": {"package"},
    "sampler": {"errors"},          # the Cython sampler and its C units: reads the target, no GIL
    "target": {"sampler"},          # the process: its registry opened, procfs, Ruby's objects read
    "ebpf": {"target"},             # the eBPF programs and their hub
    "push": {"errors"},             # profiles pushed while recording
    "recording": {"ebpf", "push"},  # a target, its sampler and session; a tree, its files
    "agent": {"recording"},         # one per host: a recording per process tree
    "commands": {"agent"},          # the subcommands
    "cli": {"commands"},
}


def below(layer: str) -> Set[str]:
    """Every layer under `layer` (what LAYERS lets it import, transitively)."""
    seen: Set[str] = set()
    todo = list(LAYERS[layer])
    while todo:
        x = todo.pop()
        if x not in seen:
            seen.add(x)
            todo.extend(LAYERS[x])
    return seen


def modules_of(root: Path) -> Dict[str, Path]:
    """Every module of the package at root, by dotted name under it ("" is root's __init__):
    Python files, Cython modules and declaration files (a .pxd alone is cimported by its name)."""
    mods: Dict[str, Path] = {}
    for path in sorted(root.rglob("*")):
        if path.suffix not in (".py", ".pyx", ".pxd") or "__pycache__" in path.parts:
            continue
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        # a .pyx and its .pxd are one module: both files' imports are its imports
        mods.setdefault(".".join(parts), path)
    return mods


def layer_of(module: str) -> str:
    head = module.split(".")[0]
    if module == "":
        return "package"
    return head


def _resolve(base: str, names: List[str], mods) -> List[str]:
    """`from base import names`: the modules depended on (base.name where that is a module, else base)."""
    out = []
    for n in names:
        full = f"{base}.{n}" if base else n
        out.append(full if full in mods else base)
    return out


def _absolute(module: str, is_package: bool, level: int, name: str) -> str:
    """A relative import's target, as a dotted name under the package."""
    parts = module.split(".") if module else []
    if not is_package:
        parts = parts[:-1]
    parts = parts[:len(parts) - (level - 1)] if level > 1 else parts
    return ".".join(parts + ([name] if name else []))


CYTHON_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+(\.*)([\w.]*)[ \t]+c?import[ \t]+(\([^)]*\)|[\w, \t*]+)"
                           r"|c?import[ \t]+([\w.]+))", re.M)


def imports_of(module: str, path: Path, mods, package: str) -> Set[str]:
    """The package's modules that module imports (outside the package: left out)."""
    is_package = path.stem == "__init__"
    deps: List[str] = []

    def inside(dotted: str):
        if dotted == package:
            return ""
        if dotted.startswith(package + "."):
            return dotted[len(package) + 1:]
        return None

    files = [path] + [path.with_suffix(s) for s in (".pyx", ".pxd") if path.with_suffix(s) != path]
    for f in files:
        if not f.is_file():
            continue
        text = f.read_text()
        if f.suffix == ".py":
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.Import):
                    deps += [m for a in node.names if (m := inside(a.name)) is not None]
                elif isinstance(node, ast.ImportFrom):
                    base = (_absolute(module, is_package, node.level, node.module or "") if node.level
                            else inside(node.module or ""))
                    if base is not None:
                        deps += _resolve(base, [a.name for a in node.names], mods)
        else:
            for dots, frm, names, plain in CYTHON_IMPORT.findall(text):
                if plain:
                    m = inside(plain)
                    if m is not None:
                        deps.append(m)
                    continue
                base = _absolute(module, is_package, len(dots), frm) if dots else inside(frm)
                if base is not None:
                    deps += _resolve(base, [n.strip() for n in names.strip("()").split(",") if n.strip()], mods)
    return {d for d in deps if d != module}


def import_graph(root: Path, package: str = "sdb_sidecar") -> Dict[str, Set[str]]:
    mods = modules_of(root)
    return {m: {d for d in imports_of(m, p, mods, package) if d in mods or d == ""} for m, p in mods.items()}


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The import cycles: each strongly connected set of more than one module (Tarjan's)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on: Set[str] = set()
    found: List[List[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def layering_faults(graph: Dict[str, Set[str]]) -> Tuple[List[str], List[str], List[List[str]]]:
    """(modules in no layer, imports that go up or sideways, import cycles)."""
    unplaced = sorted(m for m in graph if layer_of(m) not in LAYERS)
    upward = []
    for m, deps in sorted(graph.items()):
        lm = layer_of(m)
        if lm not in LAYERS:
            continue
        for d in sorted(deps):
            ld = layer_of(d)
            if ld != lm and ld not in below(lm):
                upward.append(f"{m or '__init__'} ({lm}) imports {d or '__init__'} ({ld})")
    return unplaced, upward, cycles(graph)


def test_the_layers_themselves_form_no_cycle():
    for layer in LAYERS:
        assert layer not in below(layer), f"layer {layer} is below itself"


def test_every_import_of_the_sidecar_goes_down_its_layers_and_none_is_circular():
    graph = import_graph(PACKAGE)
    assert {"sampler._sampler", "target.target", "ebpf.hub", "recording.session", "cli"} <= set(graph)
    unplaced, upward, loops = layering_faults(graph)
    assert not unplaced, f"modules in no layer (place their folder in LAYERS): {unplaced}"
    assert not upward, "imports against the layers:\n" + "\n".join(upward)
    assert not loops, f"modules that import each other: {loops}"


def test_the_check_finds_a_cycle_even_under_type_checking_and_an_upward_import(tmp_path):
    # GIVEN a package as the sidecar once was: ebpf and ebpf_view importing each other (one import
    # only under TYPE_CHECKING), and the target layer importing the recording layer
    pkg = tmp_path / "sdb_sidecar"
    for d in ("ebpf", "target", "recording", "sampler"):
        (pkg / d).mkdir(parents=True)
        (pkg / d / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "ebpf" / "symbolizer.py").write_text("from .view import EbpfView\n")
    (pkg / "ebpf" / "view.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .symbolizer import EbpfSymbolizer\n")
    (pkg / "target" / "target.py").write_text("def f():\n    from ..recording import session\n")
    (pkg / "recording" / "session.py").write_text("from sdb_sidecar.target.target import f\n")
    (pkg / "sampler" / "_walk.pxd").write_text("from sdb_sidecar.sampler._types cimport Job\n")
    (pkg / "sampler" / "_types.pxd").write_text("from sdb_sidecar.sampler._walk cimport walk\n")
    # WHEN its imports are checked
    unplaced, upward, loops = layering_faults(import_graph(pkg))
    # THEN each fault is named
    assert unplaced == []
    assert upward == ["target.target (target) imports recording.session (recording)"]
    assert ["ebpf.symbolizer", "ebpf.view"] in loops
    assert ["recording.session", "target.target"] in loops
    assert ["sampler._types", "sampler._walk"] in loops
