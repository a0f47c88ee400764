"""What attach, record and top share: their recording options on the command line, and what
happens after a recording (the --format profile made in-process, or the sdb-symbolize commands to
run printed)."""
from __future__ import annotations

import argparse
import math
import os
import shlex
import shutil
import sys
from typing import Dict, List

from ..errors import Exit, SdbError
from ..push.config import (BASIC_ENV, DEFAULT_INTERVAL_S, DEFAULT_QUEUE_BYTES, DEFAULT_TIMEOUT_S, TENANT_ENV,
                           TOKEN_ENV)
from ..recording.options import DEFAULTS

# the formats `attach` and `record` suggest, in this order, when they are registered
SUGGESTED_FORMATS = ("collapsed", "speedscope", "flamegraph")


def add_recording_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rate", "-r", type=positive_float, default=DEFAULTS.rate_hz,
                   help=f"samples per second (default {DEFAULTS.rate_hz:g})")
    p.add_argument("--duration", "-d", type=positive_float, default=DEFAULTS.duration_s,
                   help="seconds to record (default: until Ctrl-C or the target exits)")
    p.add_argument("-o", "--output", default="trace.msgpack", help="trace file (default trace.msgpack)")
    add_depth_argument(p)
    p.add_argument("--rotate", type=rotation, metavar="TIME|SIZE",
                   help="always on: close the trace and start the next every TIME (`10m`, `1h`, `30s`) or once it "
                        "holds SIZE (`100MB`, `1GB`); each file is complete on its own, named after -o with its "
                        "start time (trace.20261126T071500Z.msgpack)")
    p.add_argument("--keep", type=positive_int, default=DEFAULTS.keep, metavar="N",
                   help=f"with --rotate: keep the newest N files, remove older ones (default {DEFAULTS.keep})")
    p.add_argument("--quiet", "-q", action="store_true", help="no status line")
    p.add_argument("--no-children", action="store_true",
                   help="record this process alone (default: also every descendant that runs the sdb gem, such "
                        "as puma's or unicorn's workers and Sidekiq's forks, from the moment each appears)")
    p.add_argument("--no-ebpf", action="store_true",
                   help="do not name ISeqs at birth with eBPF (default: use it when root, bcc, kernel headers "
                        "and uprobes are there); every ISeq is then named by a remote read at first sight")
    p.add_argument("--no-in-context", action="store_true",
                   help="copy running threads' stacks from outside only (default, with eBPF: a BPF program "
                        "copies a running thread's stack on its own CPU at a timer tick, so that calls shorter "
                        "than a copy keep their samples; the ticks cost a busy app ~1.4-3 %% at 1 kHz, and stay at "
                        "1 kHz at higher --rate)")
    p.add_argument("--ebpf-max-rate", type=non_negative_float, default=DEFAULTS.ebpf_max_rate, metavar="N",
                   help=f"ISeqs created per second above which the eBPF probes are paused (each costs the app "
                        f"~2 us; ISeqs born while paused are named by remote reads); 0: never pause "
                        f"(default {DEFAULTS.ebpf_max_rate:g})")
    formats = symbolizer_formats()
    p.add_argument("--format", "-f", choices=sorted(formats) or None, metavar="FORMAT",
                   help="at the end, make the profile in this format (as sdb-symbolize does) and write it next "
                        "to the trace" + (f" ({', '.join(sorted(formats))})" if formats else ""))


def add_depth_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-depth", type=int, default=DEFAULTS.max_depth,
                   help=f"frames read per stack at most (default {DEFAULTS.max_depth})")


_TIME_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_SIZE_UNITS = {"kb": 1e3, "mb": 1e6, "gb": 1e9, "kib": 1024.0, "mib": 1024.0 ** 2, "gib": 1024.0 ** 3}


def add_push_arguments(p: argparse.ArgumentParser, service: bool = True) -> None:
    """The --push options, read by push.config.push_config (service False: no --service, the agent's
    processes each name their own)."""
    g = p.add_argument_group("pushing profiles while recording")
    g.add_argument("--push", action="append", default=[], metavar="KIND=URL",
                   help="every --push-interval, send that interval's profiles to a backend: "
                        "pyroscope=http://pyroscope:4040 (Connect Push API), otlp=http://collector:4318 (OTLP "
                        "profiles over HTTP); repeatable. Credentials: $SDB_PUSH_TOKEN (bearer) or "
                        "$SDB_PUSH_BASIC_AUTH (user:password), or --push-auth-file")
    g.add_argument("--push-interval", type=positive_float, default=DEFAULT_INTERVAL_S, metavar="SECONDS",
                   help=f"seconds of samples in each pushed profile (default {DEFAULT_INTERVAL_S:g}, at least 1)")
    if service:
        g.add_argument("--service", metavar="NAME", help="the service name pushed profiles carry (default: the "
                                                         "process's program name)")
    g.add_argument("--push-ca", metavar="FILE", help="CA certificates (PEM) for https:// (default: the system's)")
    g.add_argument("--push-auth-file", metavar="FILE",
                   help=f"a file of KEY=VALUE lines: {TOKEN_ENV}=TOKEN or {BASIC_ENV}=USER:PASSWORD, "
                        f"and {TENANT_ENV}=ID (read instead of the environment)")
    g.add_argument("--push-tenant", metavar="ID", help="X-Scope-OrgID header (Pyroscope's multi-tenant mode)")
    g.add_argument("--push-queue", type=positive_float, default=DEFAULT_QUEUE_BYTES / (1 << 20), metavar="MIB",
                   help=f"profiles waiting to be sent, per destination, at most this many MiB; the oldest are "
                        f"dropped (counted) beyond it (default {DEFAULT_QUEUE_BYTES >> 20})")
    g.add_argument("--push-timeout", type=positive_float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                   help=f"wait at most this long for a backend's answer (default {DEFAULT_TIMEOUT_S:g}; the "
                        f"connect: 5 s)")
    g.add_argument("--push-ingest", action="store_true",
                   help="pyroscope: use the older /ingest endpoint instead of the Connect Push API")


def rotation(text: str):
    """`10m`, `1h`, `30s`, `2d` -> (seconds, 0); `100MB`, `1GB`, `512MiB` -> (0, bytes)."""
    t = text.strip().lower()
    for units, as_size in ((_SIZE_UNITS, True), (_TIME_UNITS, False)):
        for unit in sorted(units, key=len, reverse=True):
            if t.endswith(unit):
                try:
                    v = float(t[:-len(unit)]) * units[unit]
                except ValueError:
                    break
                if v > 0 and v != float("inf"):
                    if as_size:
                        if v < 64 * 1024:
                            raise argparse.ArgumentTypeError(f"--rotate {text}: at least 64KiB")
                        return 0.0, int(v)
                    if v < 1:
                        raise argparse.ArgumentTypeError(f"--rotate {text}: at least 1s")
                    return v, 0
    raise argparse.ArgumentTypeError(f"not a time or size: {text!r} (say 10m, 1h, 100MB)")


def _number(cast, what: str, positive: bool):
    """An argparse type: `cast` of the text, more than 0 (positive) or at least 0."""
    def parse(text: str):
        try:
            v = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None
        if not math.isfinite(v):
            raise argparse.ArgumentTypeError(f"not a finite number: {text!r}")
        if v < 0 or (positive and v == 0):
            raise argparse.ArgumentTypeError(f"must be {'more than' if positive else 'at least'} 0: {text!r}")
        return v
    return parse


positive_float = _number(float, "a number", positive=True)
non_negative_float = _number(float, "a number", positive=False)
positive_int = _number(int, "a whole number", positive=True)


def check_output_dir(path: str) -> None:
    """Fail before anything starts when the trace cannot be written (record() checks again)."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise SdbError(f"cannot write {path}: no such directory {folder}", Exit.OUTPUT)
    if not os.access(folder, os.W_OK | os.X_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise SdbError(f"cannot write {path}: permission denied", Exit.OUTPUT)


# ------------------------------------------------------------------ after a recording
def symbolizer_formats() -> Dict[str, str]:
    """The formats sdb-symbolize registers: name -> file extension ({} if it cannot be loaded:
    then --format is checked by sdb-symbolize itself)."""
    try:
        from sdb_symbolize.reporters import REPORTERS
    except Exception:  # a broken symbolizer must not stop a recording
        return {}
    return {name: cls.extension or f".{name}" for name, cls in REPORTERS.items()}


def profile_path(trace: str, fmt: str) -> str:
    """Where the profile of `trace` in format `fmt` goes: beside it, trace.msgpack -> trace.<ext>."""
    ext = symbolizer_formats().get(fmt) or f".{fmt}"
    stem = trace[:-len(".msgpack")] if trace.endswith(".msgpack") else trace
    return stem + ext


def symbolize_argv() -> List[str]:
    """How to run the sdb-symbolize that belongs with this sdb-sidecar, as short as it can be."""
    here = os.path.join(os.path.dirname(sys.executable), "sdb-symbolize")
    on_path = shutil.which("sdb-symbolize")
    if on_path and os.access(here, os.X_OK) and os.path.samefile(on_path, here):
        return ["sdb-symbolize"]
    if os.access(here, os.X_OK):
        return [here]
    return [sys.executable, "-m", "sdb_symbolize.cli"]


def symbolize_command(trace: str, fmt: str) -> List[str]:
    return [*symbolize_argv(), trace, "--format", fmt, "-o", profile_path(trace, fmt)]


def _start_cwd():
    try:
        return os.getcwd()
    except OSError:
        return None


# The directory the command was started in, taken at import (before any thread runs): bcc chdir()s
# the whole process into the kernel's headers while it compiles the eBPF programs, beside the
# sampling, so a relative path used then (the sdb-symbolize run at the end of a short recording:
# "again.msgpack: no such file") must not depend on the process's current directory.
START_CWD = _start_cwd()


def finish_recording(args, counts: dict) -> int:
    """After attach/record: make the --format profile of each trace file kept, in this process (the
    symbolizer's library, exactly as the printed sdb-symbolize command would), or print the commands
    to run. Returns sdb-symbolize's exit code (0 when no profile was asked for)."""
    files = counts.get("files") or [args.output]
    if counts.get("push") and not args.quiet:
        from ..push.pusher import Pusher
        sys.stderr.write("".join(line + "\n" for line in Pusher.result_lines(counts["push"])))
    where = files[0] if len(files) == 1 else f"{len(files)} files ({files[0]} ... {files[-1]})"
    if args.format:
        rc = 0
        for trace in files:
            rc = make_profile(trace, args.format) or rc
        if rc != 0:
            sys.stderr.write(f"sdb: sdb-symbolize failed (exit {rc}); the trace is kept: {where}\n")
        elif not args.quiet:
            sys.stderr.write(f"sdb: wrote {counts['samples']} samples of {of_what(counts)} to "
                             f"{where} ({ending(counts, args)}), the {args.format} profile"
                             f"{'s' if len(files) > 1 else ''} beside {'them' if len(files) > 1 else 'it'}: "
                             f"{profile_path(files[-1], args.format)}\n")
        return rc
    if not args.quiet:
        print_next_steps(files[-1] if len(files) > 1 else args.output, counts, args, where)
    return 0


def make_profile(trace: str, fmt: str) -> int:
    """What `symbolize_command(trace, fmt)` does, in-process: sdb-symbolize's exit code. A relative
    path is the start directory's (START_CWD)."""
    try:
        from sdb_symbolize.cli import symbolize
        from sdb_symbolize.options import ProfileOptions
    except Exception as e:      # a broken symbolizer: the trace is kept all the same
        sys.stderr.write(f"sdb: cannot load sdb-symbolize ({type(e).__name__}: {e}); the trace is kept: {trace}; "
                         f"run: {shlex.join(symbolize_command(trace, fmt))}\n")
        return 1
    here = START_CWD or ""
    return symbolize(os.path.join(here, trace), ProfileOptions(format=fmt),
                     os.path.join(here, profile_path(trace, fmt)))


def of_what(counts: dict) -> str:
    """`12 threads`, or `24 threads in 3 processes` for a process tree (and those left out)."""
    text = f"{counts['threads']} threads"
    n = counts.get("processes", 1)
    if n > 1:
        text += f" in {n} processes"
    if counts.get("processes_left_out"):
        text += f" ({counts['processes_left_out']} more running the gem not recorded)"
    if counts.get("processes_too_short"):
        text += f" ({counts['processes_too_short']} more gone before they could be recorded)"
    return text


def ending(counts: dict, args) -> str:
    """Why the recording ended, and what it could not name, in words."""
    reason = counts.get("reason")
    duration = getattr(args, "duration", 0) or 0
    words = {"duration": f"the {duration:g} s asked for ended", "interrupted": "interrupted",
             "target-exited": "the program exited", "stalled": "the sampler stalled",
             "target-exec": "the program exec'd another program",
             "stopped": "stopped"}.get(reason, str(reason))
    unnamed = counts.get("unnamed") or {}
    renamed = counts.get("renamed") or {}
    parts = [f"{n} {one if n == 1 else many}" for one, many, n in
             (("ISeq", "ISeqs", unnamed.get("iseqs", 0) - renamed.get("iseqs", 0)),
              ("method entry", "method entries", unnamed.get("methods", 0) - renamed.get("methods", 0))) if n]
    if parts:
        words += f"; unnamed: {' and '.join(parts)} (gone before they could be read)"
    late = renamed.get("iseqs", 0) + renamed.get("methods", 0)
    if late:
        words += f"; {late} more named by a second read, their first samples unnamed"
    return words


def print_next_steps(output: str, counts: dict, args=None, where: str = "") -> None:
    formats = symbolizer_formats()
    suggested = [f for f in SUGGESTED_FORMATS if f in formats] or sorted(formats)[:1] or ["collapsed"]
    lines = [f"sdb: wrote {counts['samples']} samples of {of_what(counts)} to {where or output} "
             f"({ending(counts, args)})",
             "sdb: next, make a profile with one of:" if not where or where == output else
             "sdb: next, make a profile of each (here the newest) with one of:"]
    lines += ["  " + shlex.join(symbolize_command(output, f)) for f in suggested]
    sys.stderr.write("\n".join(lines) + "\n")
