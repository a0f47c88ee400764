"""A real terminal for tests of `sdb-sidecar top`: tmux (send-keys, capture-pane), and the reading of
top's table from the screen."""
from __future__ import annotations

import os
import re
import subprocess

from conftest import REPO, wait_for

ROW = re.compile(r"^\s*([\d.]+)%\s+([\d.]+)%\s+([\d.]+)s\s+([\d.]+)s\s+(.*)$")


class Tmux:
    """A tmux server of our own (its own socket) running one interactive shell in a window of its size."""

    def __init__(self, name: str, width: int = 120, height: int = 40):
        self.base = ["tmux", "-L", name]
        env = dict(os.environ, PS1="$ ", TERM="xterm")
        subprocess.run([*self.base, "-f", "/dev/null", "new-session", "-d", "-x", str(width), "-y", str(height),
                        "-c", str(REPO),
                        "bash --norc --noprofile"], check=True, env=env)

    def send(self, *keys: str) -> None:
        subprocess.run([*self.base, "send-keys", *keys], check=True)

    def type_line(self, line: str) -> None:
        self.send("-l", line)
        self.send("Enter")

    def screen(self) -> str:
        return subprocess.run([*self.base, "capture-pane", "-p"], check=True, capture_output=True, text=True).stdout

    def wait_screen(self, predicate, what: str, timeout: float = 20):
        last = [""]

        def check():
            last[0] = self.screen()
            return predicate(last[0])
        try:
            wait_for(check, timeout, 0.1, what)
            return last[0]
        except BaseException:
            print(f"--- the screen, waiting for {what}:\n{last[0]}")
            raise

    def kill(self) -> None:
        subprocess.run([*self.base, "kill-server"], capture_output=True)


def rows(screen: str):
    """(label, %own, %total) of each table row, top to bottom."""
    out = []
    for line in screen.splitlines():
        m = ROW.match(line)
        if m:
            out.append((m.group(5), float(m.group(1)), float(m.group(2))))
    return out


def samples_shown(screen: str) -> int:
    m = re.search(r"samples (\d+)", screen)
    return int(m.group(1)) if m else 0
