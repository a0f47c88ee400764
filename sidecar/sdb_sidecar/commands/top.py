from __future__ import annotations

import argparse
import curses
import os
import signal
import sys
import time
from typing import Dict, Optional, Tuple

from ..sampler import _sampler
from ..recording.assembly import Children, ReadyProcess
from ..errors import Exit, SdbError
from ..recording.options import TOP_RATE_HZ, TOP_WINDOW_S, Options
from ..recording.live import LiveProfile, Settings, TABLE_HEAD, command_text, merge_views, screen_lines
from ..target.process import alive, forget
from ..recording.session import DRAIN_INTERVAL_S, Session
from ..target.target import open_target, permission_error
from .common import add_depth_argument, positive_float

REFRESH_S = 1.0
SORT_KEYS = {ord("1"): 0, ord("2"): 1, ord("3"): 2, ord("4"): 3, ord("o"): 0, ord("t"): 1}


class TopCommand:
    """Show where a running Ruby process spends its time, live, like top: %own and %total per function
    over a moving window. Keys: 1-4 (o, t) sort, l lines/functions, i idle, space pause, q quit."""

    name = "top"

    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("--pid", "-p", type=int, required=True, help="the Ruby process to watch")
        p.add_argument("--rate", "-r", type=positive_float, default=TOP_RATE_HZ,
                       help=f"samples per second (default {TOP_RATE_HZ:g})")
        p.add_argument("--window", "-w", type=positive_float, default=TOP_WINDOW_S,
                       help=f"seconds of samples the table counts (default {TOP_WINDOW_S:g})")
        p.add_argument("--no-children", action="store_true",
                       help="watch this process alone (default: also its descendants that run the sdb gem, such as "
                            "puma's workers, in one table)")
        add_depth_argument(p)

    @staticmethod
    def run(args) -> int:
        target = open_target(args.pid)
        if not (sys.stdin.isatty() and sys.stdout.isatty()):
            raise SdbError("top draws on a terminal: run it in one (or use attach/snapshot)", Exit.USAGE)
        # the watcher needs no eBPF: names are read when first sampled
        opts = Options.from_args(args, quiet=True, ebpf=False, duration_s=0.0)
        ready = ReadyProcess(target, opts)
        live = LiveProfile({"pid": target.pid, "ruby": target.info["ruby"], "rate_hz": opts.rate_hz}, args.window)
        session = ready.session(live, opts)
        info = {"pid": target.pid, "command": command_text(target.command), "rate_hz": opts.rate_hz,
                "window_s": args.window, "achieved_hz": 0.0, "exited": False,
                "ruby": target.info["ruby"] + (" +YJIT" if "+YJIT" in target.info.get("ruby_description", "")
                                               else "")}
        old = {s: signal.signal(s, _quit) for s in (signal.SIGTERM, signal.SIGHUP)}
        session.start()
        screen = Screen(session, live, info, opts, Children(target, opts) if opts.children else None)
        try:
            curses.wrapper(screen.loop)
        except (_Quit, KeyboardInterrupt):
            pass
        except curses.error as e:
            raise SdbError(f"cannot draw on this terminal (TERM={os.environ.get('TERM', '')!r}): {e}",
                           Exit.USAGE) from None
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            for sess, _ in screen.watched.values():
                sess.abort()
                sess.close()
            if screen.children is not None:
                screen.children.close()
        if session.reason() == "permission":
            raise permission_error(target.pid, PermissionError(1, "Operation not permitted"))
        return 0


class _Quit(Exception):
    """SIGTERM or SIGHUP: leave like q (curses.wrapper restores the terminal on the way out)."""


def _quit(signum, frame):
    raise _Quit()


class Screen:
    """The screen, and what it watches: the process, and (children) each descendant that runs the gem,
    each with its own Session and LiveProfile; the table counts them all together."""

    def __init__(self, session: Session, live: LiveProfile, info: dict, opts: Options,
                 children: Optional[Children] = None):
        self.session = session
        self.sampler = session.sampler
        self.live = live
        self.info = info
        self.opts = opts
        self.children = children
        # pid -> its Session and LiveProfile: the process first, then each descendant while it runs
        self.watched: Dict[int, Tuple[Session, LiveProfile]] = {session.target.pid: (session, live)}
        self.settings = Settings()
        self.lines = []
        self.exited_ns = 0      # when the target was seen gone: the window stops moving there

    def follow(self) -> None:
        """Watch the descendants that run the gem as they appear, found and opened as attach finds and
        opens them (assembly.Children); a descendant's whose recording ended is let go (its pid may
        come back as another process)."""
        for pid, (sess, _) in list(self.watched.items())[1:]:
            if not sess.running():
                del self.watched[pid]
                sess.close()
                forget(pid)
        if self.children is None or not self.children.due():
            return
        for ready in self.children.scan(self.watched, lambda: len(self.watched)):
            pid = ready.target.pid
            live = LiveProfile({"pid": pid, "ruby": ready.target.info["ruby"], "rate_hz": self.opts.rate_hz},
                               self.live.window_ns / 1e9)
            session = ready.session(live, self.opts)
            session.start()
            self.watched[pid] = (session, live)

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
            for sess, _ in list(self.watched.values())[1:]:
                if sess.running():
                    sess.step(wait=False)
            self.follow()
            if self.session.running() or not self.info["exited"]:
                self.session.step(wait=False)       # the keyboard's timeout paces the drains
                if not self.session.running() or not alive(self.info["pid"]):
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
        now = self.exited_ns or _sampler.monotonic_ns()
        views = [live.view(now, self.settings.lines, self.settings.idle) for sess, live in self.watched.values()
                 if sess is self.session or sess.running()]
        view = merge_views(views)
        self.info["processes"] = len(views)
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
