from __future__ import annotations

import argparse
import curses
import os
import signal
import sys
import threading
import time

from .. import _sampler
from ..errors import Exit, SdbError
from ..live import LiveProfile, Settings, TABLE_HEAD, command_text, screen_lines
from ..recorder import DRAIN_INTERVAL_S, Drainer, _alive
from ..target import check_readable, open_target, permission_error
from .attach import positive_float

REFRESH_S = 1.0
SORT_KEYS = {ord("1"): 0, ord("2"): 1, ord("3"): 2, ord("4"): 3, ord("o"): 0, ord("t"): 1}


class TopCommand:
    """Show where a running Ruby process spends its time, live, like top: %own and %total per function
    over a moving window. Keys: 1-4 (o, t) sort, l lines/functions, i idle, space pause, q quit."""

    name = "top"

    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("--pid", "-p", type=int, required=True, help="the Ruby process to watch")
        p.add_argument("--rate", "-r", type=positive_float, default=100.0, help="samples per second (default 100)")
        p.add_argument("--window", "-w", type=positive_float, default=10.0,
                       help="seconds of samples the table counts (default 10)")
        p.add_argument("--max-depth", type=int, default=2048, help="frames read per stack at most (default 2048)")

    @staticmethod
    def run(args) -> int:
        target = open_target(args.pid)
        if not (sys.stdin.isatty() and sys.stdout.isatty()):
            raise SdbError("top draws on a terminal: run it in one (or use attach/snapshot)", Exit.USAGE)
        sampler = _sampler.Sampler(target.registry, target.pid, args.rate, args.max_depth)
        check_readable(target.pid, target.registry, sampler)
        live = LiveProfile({"pid": target.pid, "ruby": target.info["ruby"], "rate_hz": args.rate}, args.window)
        drainer = Drainer(target, sampler, live)
        result = []
        worker = threading.Thread(target=lambda: result.append(sampler.run(0)), name="sdb-sampler", daemon=True)
        info = {"pid": target.pid, "command": command_text(target.command), "rate_hz": args.rate,
                "window_s": args.window, "achieved_hz": 0.0, "exited": False,
                "ruby": target.info["ruby"] + (" +YJIT" if "+YJIT" in target.info.get("ruby_description", "")
                                               else "")}
        old = {s: signal.signal(s, _quit) for s in (signal.SIGTERM, signal.SIGHUP)}
        worker.start()
        try:
            curses.wrapper(Screen(sampler, drainer, live, info, worker).loop)
        except (_Quit, KeyboardInterrupt):
            pass
        except curses.error as e:
            raise SdbError(f"cannot draw on this terminal (TERM={os.environ.get('TERM', '')!r}): {e}",
                           Exit.USAGE) from None
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            sampler.stop()
            worker.join(5)
        if result and result[0] == "permission":
            raise permission_error(target.pid, PermissionError(1, "Operation not permitted"))
        return 0


class _Quit(Exception):
    """SIGTERM or SIGHUP: leave like q (curses.wrapper restores the terminal on the way out)."""


def _quit(signum, frame):
    raise _Quit()


class Screen:
    def __init__(self, sampler, drainer: Drainer, live: LiveProfile, info: dict, worker: threading.Thread):
        self.sampler = sampler
        self.drainer = drainer
        self.live = live
        self.info = info
        self.worker = worker
        self.settings = Settings()
        self.lines = []
        self.exited_ns = 0      # when the target was seen gone: the window stops moving there

    def loop(self, scr) -> None:
        try:
            curses.curs_set(0)
        except curses.error:
            pass
        scr.timeout(int(DRAIN_INTERVAL_S * 1000))
        next_refresh = 0.0
        while True:
            key = scr.getch()
            if key in (ord("q"), ord("Q")):
                return
            if self.worker.is_alive() or not self.info["exited"]:
                self.drainer.drain()
                if not self.worker.is_alive() or not _alive(self.info["pid"]):
                    self.sampler.stop()
                    self.info["exited"] = True
                    self.exited_ns = _sampler.monotonic_ns()
                    if self.sampler.fatal_errno not in (0, 3):  # not ESRCH: e.g. permission
                        return
            st = self.settings
            redraw = key != -1
            if key in SORT_KEYS:
                st.sort = SORT_KEYS[key]
            elif key == ord("l"):
                st.lines = not st.lines
            elif key == ord("i"):
                st.idle = not st.idle
            elif key == ord(" "):
                st.paused = not st.paused
            elif key == curses.KEY_RESIZE:
                curses.update_lines_cols()
            now = time.monotonic()
            if now >= next_refresh or (redraw and not st.paused) or key == ord(" ") or key == curses.KEY_RESIZE:
                if not st.paused or not self.lines or key == curses.KEY_RESIZE:
                    self.compute(scr)
                self.draw(scr)
                next_refresh = now + REFRESH_S

    def compute(self, scr) -> None:
        h, w = scr.getmaxyx()
        stats = self.sampler.stats()
        if stats["ticks"] > 1 and stats["last_tick_ns"] > stats["start_ns"]:
            self.info["achieved_hz"] = (stats["ticks"] - 1) * 1e9 / (stats["last_tick_ns"] - stats["start_ns"])
        view = self.live.view(self.exited_ns or _sampler.monotonic_ns(), self.settings.lines, self.settings.idle)
        self.lines = screen_lines(self.info, view, self.settings, w, h)

    def draw(self, scr) -> None:
        h, w = scr.getmaxyx()
        if self.settings.paused:  # the frozen table, with the header saying so
            self.lines[1] = self.lines[1].replace("  [paused]", "") + "  [paused]"
        else:
            self.lines[1] = self.lines[1].replace("  [paused]", "")
        scr.erase()
        for y, text in enumerate(self.lines[:h]):
            try:
                scr.addnstr(y, 0, text, max(0, w - 1), curses.A_REVERSE if y == TABLE_HEAD else curses.A_NORMAL)
            except curses.error:
                pass
        scr.refresh()
