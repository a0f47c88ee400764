"""deploy/Dockerfile and scripts/image-rootfs, which proves its steps without Docker, cannot drift
apart: the script reads the Dockerfile and runs its instructions, and refuses one it does not run as
Docker would, so a Dockerfile it accepts is one it runs whole. The build itself (debootstrap, apt,
pip: ~230 MB downloaded cold) is on demand: `scripts/image-rootfs check` (docs/agent.md)."""
from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.once


def image_rootfs():
    """scripts/image-rootfs as a module (a script, not a package's)."""
    if "sdb_image_rootfs" not in sys.modules:
        path = str(REPO / "scripts" / "image-rootfs")
        loader = importlib.machinery.SourceFileLoader("sdb_image_rootfs", path)
        module = importlib.util.module_from_spec(importlib.util.spec_from_loader("sdb_image_rootfs", loader))
        sys.modules["sdb_image_rootfs"] = module    # dataclasses look their module up by name
        loader.exec_module(module)
    return sys.modules["sdb_image_rootfs"]


def test_the_rootfs_script_runs_every_instruction_of_the_dockerfile():
    m = image_rootfs()
    stages = m.parse(m.DOCKERFILE.read_text())
    # a stage that builds the wheel, then the agent's, both on the base the script makes
    assert [s.name for s in stages] == ["wheel", None]
    assert all(s.base in m.BASES for s in stages)
    steps = [(s.instruction, s.args) for s in stages[-1].steps]
    assert ("COPY", "--from=wheel /dist /tmp/dist") in steps
    runs = " ".join(a for i, a in steps if i == "RUN")
    # Debian's bcc, and the wheel in a virtualenv that sees Debian's packages (bcc's module is one)
    assert "python3-bpfcc" in runs and "--system-site-packages /opt/sdb" in runs
    assert m.entrypoint(stages) == ["/opt/sdb/bin/sdb-sidecar", "agent"]


@pytest.mark.parametrize("text, refused", [
    ("FROM debian:bookworm-slim\nENV A=1\n", "ENV"),
    ("FROM debian:bookworm-slim\nADD x /x\n", "ADD"),
    ("FROM debian:bookworm-slim\nUSER nobody\n", "USER"),
    ("FROM ubuntu:24.04\n", "ubuntu"),
    ("FROM debian:bookworm-slim\nCOPY --chown=1:1 a /a\n", "COPY"),
    ("FROM debian:bookworm-slim\nCOPY --from=nowhere /a /a\n", "nowhere"),
    ("FROM debian:bookworm-slim\nRUN [\"true\"]\n", "shell form"),
    ("FROM debian:bookworm-slim\nENTRYPOINT sdb-sidecar agent\n", "exec form"),
    ("FROM debian:bookworm-slim\nRUN true \\\n", "ends inside"),
])
def test_an_instruction_the_script_cannot_run_as_docker_does_is_refused(text, refused):
    m = image_rootfs()
    with pytest.raises(m.DockerfileError, match=refused):
        m.parse(text)


def test_continued_lines_and_comments_inside_them_are_one_instruction():
    m = image_rootfs()
    (stage,) = m.parse("FROM debian:bookworm-slim AS a\nRUN echo 1 \\\n# a comment\n && echo 2\n")
    assert stage.name == "a"
    assert [(s.line, s.instruction, " ".join(s.args.split())) for s in stage.steps] == [(2, "RUN", "echo 1 && echo 2")]


def test_every_file_the_dockerfile_copies_from_the_checkout_is_there():
    m = image_rootfs()
    for stage in m.parse(m.DOCKERFILE.read_text()):
        for step in stage.steps:
            if step.instruction == "COPY":
                source, patterns, _ = m.copy_sources(step)
                if source is None:
                    assert m.expand(REPO, patterns, step), step


def test_the_wheel_stage_copies_what_the_wheel_build_reads():
    # the sampler's C includes sdb_registry.h from the gem (setup.py's include_dirs); pyproject's
    # package-dir names the trees the packages come from
    import tomllib
    m = image_rootfs()
    copied = set()
    for step in m.parse(m.DOCKERFILE.read_text())[0].steps:
        if step.instruction == "COPY":
            copied.update(m.copy_sources(step)[1])
    dirs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    roots = {Path(d).parts[0] for d in dirs.values()}
    assert roots <= copied, roots - copied
    assert {"pyproject.toml", "setup.py", "README.md", "gem/ext/sdb/sdb_registry.h"} <= copied
