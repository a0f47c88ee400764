"""`sdb-sidecar top`, driven through a real terminal: tmux (send-keys, capture-pane) against a live
Ruby program with known hot methods (tests/programs/top_target.rb)."""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import time

import pytest

from conftest import REPO, SIDECAR
from terminal import Tmux, rows, samples_shown

pytestmark = [pytest.mark.once,
              pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (scripts/setup-machine "
                                                                          "installs it)")]


@pytest.fixture
def tmux():
    t = Tmux(f"sdb-test-{os.getpid()}-{time.monotonic_ns()}")
    yield t
    t.kill()


def names(label: str, name: str) -> bool:
    """The row is method `name`, bare or qualified (`Object#name`)."""
    return re.match(rf"^(?:[\w:]+[#.])?{name} \(", label) is not None


def index_of(table, name: str) -> int:
    found = [i for i, r in enumerate(table) if names(r[0], name)]
    assert found, f"{name} not in {table}"
    return found[0]


def terminal_modes(tmux: Tmux, tag: str) -> str:
    """icanon/echo as `stty -a` shows them in the pane's shell ("-echo" when echo is off)."""
    tmux.type_line(f"echo \"{tag[:2]}\"\"{tag[2:]}[$(stty -a | tr -s ' ;' '\\n\\n' | grep -E '^-?(icanon|echo)$' "
                   f"| tr '\\n' ' ')]\"")
    screen = tmux.wait_screen(lambda s: re.search(rf"^{tag}\[(.*)\]$", s, re.M), f"stty output {tag}")
    return re.search(rf"^{tag}\[(.*)\]$", screen, re.M).group(1)


def test_top_shows_live_hot_functions_sorts_toggles_lines_and_restores_the_terminal(ruby_target, tmux):
    # GIVEN a Ruby program with a hot leaf, a warm leaf, their caller and a sleeping thread
    target = ruby_target("top_target.rb")
    top = shlex.join([*SIDECAR, "top", "--pid", str(target.pid)])
    # WHEN top runs in a terminal
    tmux.type_line(f"{top}; echo TOP-EXIT=$?")
    screen = tmux.wait_screen(lambda s: "top_leaf_warm" in s and samples_shown(s) >= 150, "150 samples")
    # THEN the header names the process, its Ruby, the rate and its threads by state
    assert f"sdb top: pid {target.pid}" in screen, screen
    assert re.search(r"Ruby \d+\.\d+\.\d+", screen), screen
    assert "sampling 100 Hz" in screen, screen
    assert re.search(r"Threads: 2 +running 1, waiting for GVL 0, blocked 1", screen), screen
    assert "Showing functions, sorted by %Own" in screen, screen
    # AND sorted by own time, the hot leaf comes first and its caller (no own time) below it
    table = rows(screen)
    assert names(table[0][0], "top_leaf_hot"), table
    assert index_of(table, "top_leaf_hot") < index_of(table, "top_caller"), table
    assert 50 < table[0][1] < 95, table     # about 3/4 of the running thread's samples
    assert "top_nap" not in screen          # idle hidden
    assert not re.search(r"top_target\.rb:\d+\)", screen), "line numbers shown in functions mode"

    # WHEN "2" sorts by %Total
    tmux.send("2")
    screen = tmux.wait_screen(lambda s: "sorted by %Total" in s, "the %Total sort")
    # THEN the caller (100% total) comes before the hot leaf
    table = rows(screen)
    assert index_of(table, "top_caller") < index_of(table, "top_leaf_hot"), table
    assert index_of(table, "top_caller") <= 1 and table[index_of(table, "top_caller")][2] > 95, table

    # WHEN "l" toggles lines
    tmux.send("l")
    screen = tmux.wait_screen(lambda s: "Showing lines" in s, "lines mode")
    # THEN rows name lines: the hot leaf's lines lie inside it (lines 8-15 of top_target.rb), or, for
    # a frame YJIT runs without writing its pc, the row has no line
    hot_lines = [int(m or 0) for m in re.findall(r"top_leaf_hot \(\S*top_target\.rb(?::(\d+))?\)", screen)]
    assert hot_lines and all(n == 0 or 8 <= n <= 15 for n in hot_lines), screen

    # WHEN "i" shows idle threads and "space" pauses
    tmux.send("i")
    screen = tmux.wait_screen(lambda s: "idle shown" in s and "top_nap" in s, "the idle thread")
    tmux.send("Space")
    tmux.wait_screen(lambda s: "[paused]" in s, "the paused header")

    # WHEN the terminal is resized
    subprocess.run([*tmux.base, "resize-window", "-x", "80", "-y", "20"], check=True)
    screen = tmux.wait_screen(lambda s: s.rstrip("\n").splitlines()[-1:] and
                              s.rstrip("\n").splitlines()[-1].startswith("keys:") and
                              len(s.rstrip("\n").splitlines()) == 20, "the redraw at 80x20")
    assert all(len(line) <= 80 for line in screen.splitlines()), screen

    # WHEN q is pressed
    tmux.send("q")
    screen = tmux.wait_screen(lambda s: re.search(r"^TOP-EXIT=\d+$", s, re.M), "top's exit")
    # THEN top exits 0, its screen is gone and the terminal is back in its normal modes
    assert re.search(r"^TOP-EXIT=0$", screen, re.M), screen
    assert "sdb top: pid" not in screen, screen
    assert terminal_modes(tmux, "MODES1").split() == ["icanon", "echo"]
    assert target.alive()


def test_top_ends_on_ctrl_c_and_restores_the_terminal(ruby_target, tmux):
    target = ruby_target("top_target.rb")
    tmux.type_line(f"{shlex.join([*SIDECAR, 'top', '--pid', str(target.pid)])}; echo TOP-EXIT=$?")
    tmux.wait_screen(lambda s: "top_leaf_hot" in s, "the hot function")
    tmux.send("C-c")
    screen = tmux.wait_screen(lambda s: re.search(r"^TOP-EXIT=\d+$", s, re.M), "top's exit")
    assert re.search(r"^TOP-EXIT=0$", screen, re.M) and "sdb top: pid" not in screen, screen
    assert terminal_modes(tmux, "MODES2").split() == ["icanon", "echo"]
    assert target.alive()


def test_top_errors_are_attachs_errors(tmp_path):
    # no such process: one line and exit 3, before any terminal handling
    r = subprocess.run([*SIDECAR, "top", "--pid", "999999999"], capture_output=True, text=True, cwd=str(REPO))
    assert r.returncode == 3, r.stderr
    assert r.stderr.startswith("sdb-sidecar: error: no process with pid 999999999"), r.stderr


def test_top_counts_a_process_and_the_children_it_forks_in_one_table(ruby_target, tmux):
    # GIVEN a parent that forks two children, each running a method of its own
    from test_process_tree import Tree
    tree = Tree(ruby_target("forking_tree.rb"))
    top = shlex.join([*SIDECAR, "top", "--pid", str(tree.t.pid)])
    tmux.type_line(top)
    tmux.wait_screen(lambda s: f"sdb top: pid {tree.t.pid}" in s, "top's header")
    for name in ("a", "b"):
        tree.fork(name)
        tree.go(name)
    # THEN both children's methods are in the table, and the header counts the child processes
    screen = tmux.wait_screen(lambda s: "(+2 child processes)" in s and "work_in_a" in s and "work_in_b" in s,
                              "both children's work", timeout=60)
    assert re.search(r"Threads: 3 ", screen), screen
    tmux.send("q")


def test_top_follows_the_tree_as_it_changes_children_from_before_it_began_and_after_one_ended(ruby_target, tmux):
    # GIVEN a parent with a child forked and working before top began
    from test_process_tree import Tree
    tree = Tree(ruby_target("forking_tree.rb"))
    tree.fork("a")
    tree.go("a")
    tmux.type_line(f"{shlex.join([*SIDECAR, 'top', '--pid', str(tree.t.pid)])}; echo TOP-EXIT=$?")
    # THEN that child is counted in the table from the start
    tmux.wait_screen(lambda s: "(+1 child processes)" in s and "work_in_a" in s, "the first child's work",
                     timeout=60)
    # WHEN it is killed, THEN it leaves the table, the parent alone is watched
    tree.kill("a")
    tmux.wait_screen(lambda s: f"sdb top: pid {tree.t.pid}" in s and "child processes" not in s
                     and "work_in_a" not in s, "the first child gone", timeout=60)
    # WHEN another child is forked and works, THEN it joins the table
    tree.fork("b")
    tree.go("b")
    screen = tmux.wait_screen(lambda s: "(+1 child processes)" in s and "work_in_b" in s, "the second child's work",
                              timeout=60)
    assert "work_in_a" not in screen, screen
    tmux.send("q")
    screen = tmux.wait_screen(lambda s: re.search(r"^TOP-EXIT=\d+$", s, re.M), "top's exit")
    assert re.search(r"^TOP-EXIT=0$", screen, re.M), screen


def test_top_no_children_watches_the_process_alone(ruby_target, tmux):
    # GIVEN a parent with a child forked and working before top began
    from test_process_tree import Tree
    tree = Tree(ruby_target("forking_tree.rb"))
    tree.fork("a")
    tree.go("a")
    # WHEN top watches the parent with --no-children, idle threads shown (the parent waits on its stdin)
    tmux.type_line(shlex.join([*SIDECAR, "top", "--pid", str(tree.t.pid), "--no-children"]))
    tmux.wait_screen(lambda s: f"sdb top: pid {tree.t.pid}" in s, "top's header")
    tmux.send("i")
    # THEN 3 s of the parent's samples later (a followed child joins at top's first look), the table
    # counts the parent's one thread alone
    screen = tmux.wait_screen(lambda s: "idle shown" in s and samples_shown(s) >= 300, "300 samples", timeout=60)
    assert "child processes" not in screen and "work_in_a" not in screen, screen
    assert re.search(r"Threads: 1 ", screen), screen
    tmux.send("q")
