"""The documents' relative links lead somewhere: every file a link in README.md, ARCHITECTURE.md,
docs/*.md or benchmarks/RESULTS.md names (pictures included) is in the repository."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", REPO / "ARCHITECTURE.md", REPO / "benchmarks" / "RESULTS.md",
        *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(REPO)) for d in DOCS])
def test_every_relative_link_of_the_document_names_a_file_that_exists(doc):
    text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)
    broken = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0]
        if not (doc.parent / path).exists():
            broken.append(target)
    assert not broken, f"{doc.relative_to(REPO)} links to what is not there: {', '.join(broken)}"
