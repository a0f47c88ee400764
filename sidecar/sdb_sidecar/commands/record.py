from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from typing import Dict, List, Optional

from sdb_trace.output import printable

from .. import __version__
from ..ebpf import incontext
from ..errors import Exit, SdbError
from ..recording.options import Options
from ..target.process import exiting
from ..recording.recorder import record
from ..target.target import open_target, registry_path
from ..target.tree import descendants
from ..push.config import push_config
from .common import add_push_arguments, add_recording_arguments, check_output_dir, finish_recording

RUBY_NAME = re.compile(r"^ruby[0-9.]*$")
REGISTRY_POLL_S = 0.01
SLOW_START_NOTICE_S = 5.0
HALF_MADE_REGISTRY_S = 2.0   # a registry just created may not have its header yet

# Asks the program's Ruby where the sdb gem is: its version, its path, Gem.path, then the gem's
# base dir and require paths; exit 3 when it has no sdb gem.
PROBE = r"""
begin
  spec = Gem::Specification.find_by_name("sdb")
rescue LoadError
  puts RUBY_VERSION, RbConfig.ruby
  exit 3
end
puts RUBY_VERSION, RbConfig.ruby, Gem.path.join(File::PATH_SEPARATOR), spec.base_dir, *spec.full_require_paths
"""


class RecordCommand:
    """Run a Ruby program with the sdb gem loaded (no change to its code) and record it until it exits
    or Ctrl-C; exit with the program's exit status. Usage: record [options] -- ruby app.rb ..."""

    name = "record"

    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        add_recording_arguments(p)
        add_push_arguments(p)
        p.add_argument("program", nargs=argparse.REMAINDER, metavar="-- PROGRAM [ARGS...]",
                       help="the command to run, e.g. -- ruby app.rb, -- bin/rails server, -- bundle exec rake")

    @staticmethod
    def run(args) -> int:
        argv = list(args.program)
        if argv and argv[0] == "--":
            argv = argv[1:]
        if not argv:
            raise SdbError("no program to run: sdb-sidecar record [options] -- ruby app.rb", Exit.USAGE)
        check_output_dir(args.output)
        args.push_config = push_config(args)
        env = env_with_gem(argv)
        return Recording(args, argv, env).run()


class Recording:
    """The program as a child (same terminal, same process group: Ctrl-C reaches it as it would
    without sdb), recorded from the moment its registry appears."""

    def __init__(self, args, argv: List[str], env: Dict[str, str]):
        self.args = args
        self.argv = argv
        self.env = env
        self.child: Optional[subprocess.Popen] = None
        self.interrupted = False

    def on_signal(self, signum, frame=None) -> None:
        # SIGINT comes from the terminal to the whole process group: the program has it already.
        # SIGTERM is meant for us (kill PID, a supervisor): the program gets it too.
        if signum == signal.SIGINT:
            self.interrupted = True
        elif self.child is not None and self.child.returncode is None:
            try:
                os.kill(self.child.pid, signum)
            except ProcessLookupError:
                pass

    def run(self) -> int:
        # handlers, not SIG_IGN: exec resets them, so the program starts with the default dispositions
        old = {s: signal.signal(s, self.on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        counts = error = None
        try:
            opts = Options.from_args(self.args, quiet=True, from_start=True, push=self.args.push_config)
            # bcc changes the process's working directory while it compiles (to the kernel's
            # headers): nothing may be resolved against it from now on
            output = os.path.abspath(self.args.output)
            try:
                self.child = subprocess.Popen(self.argv, env=self.env)
            except OSError as e:
                raise SdbError(f"cannot run {self.argv[0]}: {e.strerror}", Exit.CHILD_FAILED) from None
            if opts.ebpf and opts.in_context:
                incontext.prepare(opts.rate_hz)     # compiled while the program boots
            # a hang-up reaches the program too; the recording ends when the program does
            old[signal.SIGHUP] = signal.signal(signal.SIGHUP, signal.SIG_IGN)
            try:
                target = self.wait_for_target(opts.children)
                if target is not None:
                    # quiet: the program owns the terminal
                    counts = record(target, output, opts, on_signal=self.on_signal)
                    if counts.get("files") == [output]:
                        counts["files"] = [self.args.output]    # said as the user wrote it
            except SdbError as e:
                # the program (our child, not reaped: its pid is not reused) exited while sdb
                # attached, before poll() could see it: it exited before sdb could attach
                if not exiting(self.child.pid):     # else it runs on, unrecorded
                    error = e
                    sys.stderr.write(f"sdb-sidecar: error: {e} (the program runs on, unrecorded)\n")
            status = self.wait_for_child()
        finally:
            for s, h in old.items():
                signal.signal(s, h)
        if counts is not None:
            try:
                finish_recording(self.args, counts)
            except OSError:
                pass  # the terminal went away: the trace is written
        elif error is None and not self.args.quiet:
            sys.stderr.write(f"sdb: {self.argv[0]} exited (status {status}) before sdb could attach: "
                             f"nothing recorded\n")
        return error.code if error is not None else status

    def wait_for_target(self, children: bool):
        """The program's registry, opened; or, when the program is not Ruby itself but starts it
        (`time`, `timeout`, `sh -c`, a Procfile runner; with `children`), the registry of
        its first descendant that runs the gem (a descendant's own descendants are then recorded
        with it). None if the program exited first."""
        root = self.child.pid
        started = time.monotonic()
        noticed = False
        while self.child.poll() is None:
            pid = self.registered(root, children)
            if pid is None:
                if not noticed and time.monotonic() - started > SLOW_START_NOTICE_S and not self.args.quiet:
                    noticed = True
                    sys.stderr.write(f"sdb: waiting for {self.argv[0]} (pid {root}) to load the sdb gem "
                                     f"(is it a Ruby program, or one that starts Ruby?)\n")
                time.sleep(REGISTRY_POLL_S)
                continue
            target = self.open(pid)
            if target is not None:
                if pid != root and not self.args.quiet:
                    sys.stderr.write(f"sdb: recording pid {pid} ({printable(' '.join(target.command)[:80])}), "
                                     f"started by {self.argv[0]} (pid {root})\n")
                return target
            time.sleep(REGISTRY_POLL_S)     # it exited: a zombie is listed until it is reaped
        return None

    def registered(self, root: int, children: bool) -> Optional[int]:
        """root if its registry exists; else (with children) its first descendant, parents first,
        whose registry exists; else None."""
        if os.path.exists(registry_path(root)):
            return root
        if not children:
            return None
        for pid in descendants(root):
            if os.path.exists(registry_path(pid)):
                return pid
        return None

    def open(self, pid: int):
        """pid's registry, opened once its header is written; None if pid (the program, or the
        descendant found) exited meanwhile: the caller looks again while the program runs."""
        deadline = time.monotonic() + HALF_MADE_REGISTRY_S
        while True:
            try:
                return open_target(pid, wait_s=HALF_MADE_REGISTRY_S)
            except SdbError as e:
                # gone or on its way out (its memory map goes first: "not a Ruby process", "exited");
                # the program itself is not reaped yet, so its pid is not another process's
                if exiting(pid) or self.child.poll() is not None:
                    return None         # the program exited (see run), or the descendant did
                if e.code not in (Exit.REGISTRY_FORMAT, Exit.NO_GEM) or time.monotonic() > deadline:
                    raise
                time.sleep(REGISTRY_POLL_S)

    def wait_for_child(self) -> int:
        """The program's exit status, as a shell gives it (128+N for signal N)."""
        told = False
        while True:
            try:
                rc = self.child.wait(timeout=1.0)
                break
            except subprocess.TimeoutExpired:
                if not told and not self.args.quiet:
                    told = True
                    sys.stderr.write(f"sdb: recording ended; waiting for {self.argv[0]} (pid {self.child.pid}) "
                                     f"to exit\n")
        return 128 - rc if rc < 0 else rc


# ------------------------------------------------------------------ finding the gem
def env_with_gem(argv: List[str]) -> Dict[str, str]:
    """The environment that loads the sdb gem into the program: RUBYOPT gets -I<the gem's paths> -rsdb
    (so Bundler, which hides gems outside the Gemfile, does not hide it). Raises SdbError when the
    program's Ruby has no sdb gem."""
    ruby = ruby_for(argv)
    env = dict(os.environ)
    probe_env = {k: v for k, v in env.items() if k != "RUBYOPT"}
    try:
        p = subprocess.run([ruby, "-e", PROBE], env=probe_env, stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SdbError(f"cannot run {ruby} (the Ruby that runs {argv[0]}): {getattr(e, 'strerror', None) or e}",
                       Exit.CHILD_FAILED) from None
    out = p.stdout.splitlines()
    if p.returncode == 3 and len(out) >= 2:
        gem = shlex.join([out[1], "-S", "gem", "install", "--local", f"pkg/sdb-{__version__}.gem"])
        raise SdbError(f"the sdb gem is not installed for {out[1]} (Ruby {out[0]}): install it into that Ruby "
                       f"with `{gem}` (pkg/ holds it after `make demo`), or set GEM_PATH to include the "
                       f"directory it is installed in", Exit.GEM_NOT_INSTALLED)
    if p.returncode != 0 or len(out) < 5:
        why = (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]
        raise SdbError(f"cannot ask {ruby} (the Ruby that runs {argv[0]}) where the sdb gem is: {why}",
                       Exit.CHILD_FAILED)
    gem_path, base_dir, lib_dirs = out[2], out[3], out[4:]
    if any(re.search(r"\s", d) for d in lib_dirs):
        # RUBYOPT is split at spaces: reach the gem through GEM_PATH instead
        env["GEM_PATH"] = os.pathsep.join([base_dir, gem_path])
        load = "-rsdb"
    else:
        load = " ".join([*(f"-I{d}" for d in lib_dirs), "-rsdb"])
    env["RUBYOPT"] = f"{load} {env.get('RUBYOPT', '')}".strip()
    return env


def ruby_for(argv: List[str]) -> str:
    """The Ruby that will run argv: argv[0] itself, the interpreter of its #! line, the first later
    word that names a Ruby (`time ruby ...`, `timeout 60 /opt/ruby/bin/ruby ...`), else `ruby` on
    PATH."""
    exe = argv[0] if "/" in argv[0] else shutil.which(argv[0])
    if exe is None or not os.path.exists(exe):
        raise SdbError(f"cannot run {argv[0]}: command not found", Exit.CHILD_FAILED)
    if os.path.isdir(exe) or not os.access(exe, os.X_OK):
        raise SdbError(f"cannot run {argv[0]}: permission denied", Exit.CHILD_FAILED)
    if RUBY_NAME.match(os.path.basename(exe)) or RUBY_NAME.match(os.path.basename(os.path.realpath(exe))):
        return exe
    interpreter = shebang_ruby(exe)
    if interpreter:
        return interpreter
    for word in argv[1:]:
        if RUBY_NAME.match(os.path.basename(word)):
            named = word if "/" in word else shutil.which(word)
            if named and os.access(named, os.X_OK) and not os.path.isdir(named):
                return named
    ruby = shutil.which("ruby")
    if ruby is None:
        raise SdbError(f"cannot tell which Ruby runs {argv[0]}: no ruby on PATH", Exit.CHILD_FAILED)
    return ruby


def shebang_ruby(path: str) -> Optional[str]:
    """The Ruby named by a script's #! line (`#!/usr/bin/env ruby`, `#!/opt/ruby/bin/ruby -w`), if any."""
    try:
        with open(path, "rb") as f:
            first = f.readline(512)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode(errors="replace").split()
    if words and os.path.basename(words[0]) == "env":
        words = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
    if not words or not RUBY_NAME.match(os.path.basename(words[0])):
        return None
    return words[0] if "/" in words[0] else shutil.which(words[0])
