"""Every Python package of the tree is in pyproject's package list, so the wheel carries it (a
package left out imports in the source tree and fails only in an installed wheel)."""
from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_every_package_in_the_tree_is_in_the_wheel():
    tool = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(tool["packages"])
    dirs = tool["package-dir"]
    found = set()
    for name, rel in dirs.items():
        root = REPO / rel
        for init in root.rglob("__init__.py"):
            if "__pycache__" in init.parts:
                continue
            sub = init.parent.relative_to(root).parts
            found.add(".".join((name, *sub)))
    assert found - listed == set(), f"pyproject.toml's packages lack {sorted(found - listed)}"
