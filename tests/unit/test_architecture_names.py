"""ARCHITECTURE.md is a map of the code: every file it names in backticks is in the repository, and
every identifier it names (a module, class, function, constant, C symbol, option) occurs in the
code. A rename or a removal that leaves the map behind fails here, naming what is missing."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MAP = REPO / "ARCHITECTURE.md"
CODE_SUFFIXES = {".py", ".pyx", ".pxd", ".c", ".h", ".rb", ".js", ".html", ".lua", ".toml", ".cfg", ""}
FILE = re.compile(r"^[\w./-]*\w\.(py|pyx|pxd|c|h|rb|md|js|html|lua|json|toml|gemspec|txt|sh)$")
WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
OPTION = re.compile(r"^--[a-z][a-z0-9-]*$")
QUALIFIED = re.compile(r"^([A-Za-z_]\w*)\.([A-Za-z_]\w*)$")
PY_SUFFIXES = (".py", ".pyx", ".pxd")
# Ruby's classes, named in the map with a Ruby method (`Process._fork`, `Sdb.__open`): not Python owners
RUBY_CLASSES = {"Process", "Thread", "Kernel", "Sdb", "Object", "Class", "Module", "RubyVM", "GC", "ObjectSpace"}


def tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    return [p for p in out.decode().split("\0") if p]


def code_text(files) -> str:
    parts = []
    for rel in files:
        path = REPO / rel
        if path.suffix in CODE_SUFFIXES and path.is_file() and not rel.startswith(("docs/", "benchmarks/results/")):
            try:
                parts.append(path.read_text(errors="replace"))
            except OSError:
                continue
    return "\n".join(parts)


def names_in_map():
    """Each backticked span of the map, outside fenced code blocks."""
    text = re.sub(r"```.*?```", "", MAP.read_text(), flags=re.S)
    return re.findall(r"`([^`\n]+)`", text)


def is_file_name(span: str) -> bool:
    return bool(FILE.match(span)) or (span.endswith("/") and "/" in span[:-1] + "/" and " " not in span)


def file_exists(span: str, files) -> bool:
    """A path relative to the repository root, or the tail of one (`commands/attach.py`, `_walk.pyx`)."""
    span = span.rstrip("/")
    return any(f == span or f.endswith("/" + span) or f.startswith(span + "/") or ("/" + span + "/") in ("/" + f)
               for f in files)


def owners(name: str, files) -> list[Path]:
    """The files `name` stands for in `name.attr`: the module (name.py, name.pyx, a package name/) or
    the files that define a class `name`; [] when it is neither (a Ruby constant, a C struct)."""
    files = [f for f in files if f.endswith(PY_SUFFIXES) and not f.startswith("tests/")]
    modules = [REPO / f for f in files if Path(f).stem == name or f.endswith(f"/{name}/__init__.py")]
    if modules:
        return modules
    defines = re.compile(rf"^\s*(cdef\s+)?class\s+{re.escape(name)}\b", re.M)
    return [REPO / f for f in files if defines.search((REPO / f).read_text(errors="replace"))]


def test_every_qualified_name_the_architecture_map_names_is_in_its_module_or_class():
    """`rotation.Files`, `Tree.rotate`: the attribute is in that module's or that class's file."""
    files = tracked()
    missing = []
    for span in sorted(set(names_in_map())):
        m = QUALIFIED.match(span)
        if not m or is_file_name(span) or m.group(1) in RUBY_CLASSES:
            continue
        where = owners(m.group(1), files)
        if where and not any(re.search(rf"\b{re.escape(m.group(2))}\b", p.read_text(errors="replace")) for p in where):
            missing.append(f"{span} (not in {', '.join(str(p.relative_to(REPO)) for p in where)})")
    assert not missing, f"ARCHITECTURE.md names attributes their module or class lacks: {'; '.join(missing)}"


def test_every_file_the_architecture_map_names_exists():
    files = tracked()
    missing = sorted({s for s in names_in_map() if is_file_name(s) and not s.startswith("/")
                      and not file_exists(s, files)})
    assert not missing, f"ARCHITECTURE.md names files that are not in the repository: {', '.join(missing)}"


def test_every_identifier_the_architecture_map_names_occurs_in_the_code():
    files = tracked()
    code = code_text(files)
    words = set(WORD.findall(code))
    missing = set()
    for span in names_in_map():
        if is_file_name(span) or span.startswith("/"):
            continue
        if OPTION.match(span):
            if span not in code:
                missing.add(span)
            continue
        for word in WORD.findall(span):
            if len(word) >= 3 and word not in words:
                missing.add(word)
    assert not missing, f"ARCHITECTURE.md names what the code does not have: {', '.join(sorted(missing))}"
