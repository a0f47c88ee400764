"""The one assembly of a recording's processes, for every command that samples (attach and record through
recorder.Tree, the agent's trees, top, snapshot): a process's Target with a sampler made for it and
seen to read its memory (`ReadyProcess`), the Session that runs that sampler into a writer (a trace's
ProcessWriter, top's LiveProfile, snapshot's MemoryTrace), and the descendants of a process that run
the gem, each opened the first time it can be as it appears (`Children`)."""
from __future__ import annotations

import os
import sys
import time
from typing import Callable, Container, Dict, Iterator, List, Optional

from sdb_trace.output import printable

from ..errors import Exit, SdbError
from .options import Options
from ..ebpf.hub import EbpfHub
from .session import Session, new_sampler
from ..target.target import Target, check_readable, open_target, process_exists
from ..target.tree import DirectoryWatch, descendants

SCAN_S = 2.0                # the tree is looked at this often when no registry was created meanwhile ...
PENDING_S = 0.02            # ... and this often while a new process's registry is not ready
PENDING_GIVE_UP_S = 5.0     # a process whose registry is not ready by then is left out (counted)
MAX_PROCESSES = 256         # processes followed at once; more are left out (counted)


class ReadyProcess:
    """A process ready to be sampled: its Target and a sampler made for it that read one word of its
    memory (target.check_readable: a refusal is an SdbError here, before anything is written or
    drawn, not a recording that ends at once). `session` puts them to work."""

    def __init__(self, target: Target, opts: Options):
        self.target = target
        self.sampler = new_sampler(target, opts)
        check_readable(target.pid, target.registry, self.sampler)

    def session(self, writer, opts: Options, hub: Optional[EbpfHub] = None) -> Session:
        """The Session that runs this sampler into `writer` (hub: the eBPF programs of a process tree;
        None: the session has its own when opts.ebpf)."""
        return Session(self.target, self.sampler, writer, opts, hub=hub)


class Children:
    """The descendants of a root process that run the gem, found as they appear, each opened once it
    can be (`scan` yields a ReadyProcess for each one not followed yet). A registry created in the
    root's registry directory says when to look (`due`; inotify, `fds` for a select), else every
    SCAN_S, every PENDING_S while one is not ready yet. What is passed over is counted: `left_out`
    (runs the gem, not followed: refused, not ready within PENDING_GIVE_UP_S, beyond MAX_PROCESSES),
    `too_short` (a Ruby process gone before it could be); with a notice on stderr unless opts.quiet."""

    def __init__(self, root: Target, opts: Options):
        self.root = root.pid
        self.opts = opts
        self.pending: Dict[int, float] = {}     # pid -> when first seen without a ready registry
        self.ignored: set = set()                # pids that are not Ruby, or run no (enabled) gem
        self.left_out = 0
        self.too_short = 0
        self.last_scan = 0.0
        self.watch = DirectoryWatch(os.path.dirname(root.registry.path))

    def fds(self) -> List[int]:
        """What to select on for `due` (none where inotify cannot be had)."""
        return [self.watch.fd] if self.watch.fd >= 0 else []

    def timeout(self) -> float:
        """The longest wait before `due` should be asked."""
        return PENDING_S if self.pending else SCAN_S

    def due(self) -> bool:
        """Whether to scan now: a registry was created since the last look, one is pending, or SCAN_S
        went by. Reads the watch's events (never waits)."""
        created = self.watch.names()
        for name in created:
            if name.startswith("sdb-") and name[4:].isdigit():
                self.ignored.discard(int(name[4:]))     # a process that exec'd a Ruby with the gem
        return bool(created or self.pending or time.monotonic() - self.last_scan >= SCAN_S)

    def scan(self, followed: Container[int], active: Callable[[], int]) -> Iterator[ReadyProcess]:
        """Each live descendant not in `followed` that runs the gem, opened and checked, yielded as soon
        as it is (the caller starts its sampling before the next is opened: a new child's first
        moments are sampled). active(): how many processes are followed now (MAX_PROCESSES)."""
        self.last_scan = time.monotonic()
        live = descendants(self.root)
        self.ignored.intersection_update(live)      # a pid that is gone may come back as another process
        for pid in live:
            if pid in followed or pid in self.ignored:
                continue
            ready = self._try(pid, active)
            if ready is not None:
                yield ready
        gone = [pid for pid in self.pending if not process_exists(pid)]
        for pid in gone:
            del self.pending[pid]
            self.too_short += 1

    def _try(self, pid: int, active: Callable[[], int]) -> Optional[ReadyProcess]:
        now = time.monotonic()
        first = self.pending.setdefault(pid, now)
        try:
            target = open_target(pid, wait_s=0)
        except OSError as e:                        # what open_target does not foresee: never the tree's end
            self._lost(pid, SdbError(f"cannot open its registry: {e}", Exit.FAILED))
            return None
        except SdbError as e:
            if e.code in (Exit.NOT_RUBY, Exit.NO_SUCH_PROCESS):
                if self.pending.pop(pid, None) != now and e.code == Exit.NO_SUCH_PROCESS:
                    self.too_short += 1             # a Ruby process tried before: gone before it was ready
                self.ignored.add(pid)
            elif now - first > PENDING_GIVE_UP_S or e.code in (Exit.FOREIGN_REGISTRY, Exit.PERMISSION):
                self.pending.pop(pid, None)
                self.ignored.add(pid)
                if e.code != Exit.NO_GEM:           # a Ruby without the gem is not ours to follow
                    self.left_out += 1
            return None                             # not ready yet: looked at again in PENDING_S
        del self.pending[pid]
        if active() >= MAX_PROCESSES:
            self.ignored.add(pid)
            self.left_out += 1
            return None
        try:
            return ReadyProcess(target, self.opts)
        except SdbError as e:
            self._lost(pid, e)
        except OSError as e:
            self._lost(pid, SdbError(f"cannot read it: {e}", Exit.FAILED))
        return None

    def _lost(self, pid: int, e: SdbError) -> None:
        """A descendant that could not be opened: gone meanwhile (counted too short), or left out with
        a notice saying why."""
        self.pending.pop(pid, None)
        self.ignored.add(pid)
        if e.code == Exit.NO_SUCH_PROCESS or not process_exists(pid):
            self.too_short += 1
            return
        self.left_out += 1
        if not self.opts.quiet:
            sys.stderr.write(f"\nsdb: notice: process {pid} is not recorded: {printable(str(e))}\n")

    def close(self) -> None:
        self.watch.close()
