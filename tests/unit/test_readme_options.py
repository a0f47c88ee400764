"""The README's option tables follow the commands' own argparse parsers: every option of every
command is in its table (with each of its choices, where the parser lists them), and no row names
an option the command does not have. The parsers are found through pyproject's [project.scripts],
so a module that moves keeps the check working."""
from __future__ import annotations

import argparse
import importlib
import re
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"

# command -> the README headings whose tables document it (attach and record share their recording options)
SECTIONS = {
    ("sdb-sidecar", "attach"): ["`sdb-sidecar attach`", "Recording options"],
    ("sdb-sidecar", "record"): ["`sdb-sidecar record`", "Recording options"],
    ("sdb-sidecar", "snapshot"): ["`sdb-sidecar snapshot`"],
    ("sdb-sidecar", "top"): ["`sdb-sidecar top`"],
    ("sdb-sidecar", "agent"): ["`sdb-sidecar agent`"],
    ("sdb-symbolize", None): ["`sdb-symbolize`"],
}
OPTION = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


def build_parser(script: str) -> argparse.ArgumentParser:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, _ = scripts[script].partition(":")
    return importlib.import_module(module).build_parser()


def command_parser(script: str, sub):
    parser = build_parser(script)
    if sub is None:
        return parser
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return subparsers.choices[sub]


def section(text: str, heading: str) -> str:
    """The README text under the `###` heading that contains `heading`, up to the next heading."""
    m = re.search(r"^###[^\n]*" + re.escape(heading) + r"[^\n]*\n(.*?)(?=^#)", text, re.S | re.M)
    assert m, f"README.md has no ### heading with {heading}"
    return m.group(1)


def table_rows(text: str):
    """(first cell, whole row) of each body row of the Markdown tables in `text`."""
    for line in text.splitlines():
        if not line.startswith("|") or set(line) <= set("|- "):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip("|"))]
        if cells[0] in ("option", "`--format`", "code"):
            continue
        yield cells[0], line


def documented(script: str, sub):
    text = README.read_text()
    return [row for heading in SECTIONS[(script, sub)] for row in table_rows(section(text, heading))]


@pytest.mark.parametrize("script,sub", list(SECTIONS), ids=[" ".join(filter(None, k)) for k in SECTIONS])
def test_every_option_of_the_command_is_in_its_readme_table(script, sub):
    parser = command_parser(script, sub)
    rows = documented(script, sub)
    named = {opt: row for first, row in rows for opt in OPTION.findall(first)}
    firsts = " ".join(first for first, _ in rows).lower()
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if not action.option_strings:             # a positional: its metavar or name in a row
            if str(action.metavar or action.dest).lower() not in firsts:
                missing.append(str(action.metavar or action.dest))
            continue
        for opt in action.option_strings:
            if opt not in named:
                missing.append(opt)
            elif action.choices and action.metavar is None:
                missing += [f"{opt} {c}" for c in action.choices if f"`{c}`" not in named[opt]
                            and not re.search(rf"(?<![\w-]){re.escape(str(c))}(?![\w-])", named[opt])]
    assert not missing, f"README.md's table for {script} {sub or ''} lacks: {', '.join(missing)}"


@pytest.mark.parametrize("script,sub", list(SECTIONS), ids=[" ".join(filter(None, k)) for k in SECTIONS])
def test_no_readme_row_names_an_option_the_command_lacks(script, sub):
    parser = command_parser(script, sub)
    known = {opt for a in parser._actions for opt in a.option_strings}
    stale = [opt for first, _ in documented(script, sub) for opt in OPTION.findall(first)
             if opt != "--" and opt not in known]
    assert not stale, f"README.md documents options {script} {sub or ''} does not have: {', '.join(stale)}"
