"""Finding the processes that run the gem, on the whole host: a registry is the file
/dev/shm/sdb-<its own pid> in its own mounts (docs/registry-format.md), so a scan lists /proc, groups
the processes by mount namespace (each new pid's namespace and own pid are read once and kept) and
lists each namespace's /dev/shm once (/dev/shm for ours, /proc/PID/root/dev/shm for a container's,
through any of its processes). A process whose own pid names a registry there is a candidate; opening
it (target.open_target) proves the registry is its own.

What a scan costs: a listdir of /proc, three small procfs reads for each process not seen before
(stat, status, the mount namespace's link), and one listdir per mount namespace: a few ms of CPU for a
few hundred processes. Nothing is read from a process's memory or environment."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from sdb_trace.registry_h import SDB_REGISTRY_PREFIX

from ..target.target import ns_pid, proc_start_ticks

REGISTRY_DIR = os.path.dirname(SDB_REGISTRY_PREFIX)          # /dev/shm
REGISTRY_NAME = os.path.basename(SDB_REGISTRY_PREFIX)        # sdb-


@dataclass
class Seen:
    """What a scan keeps of a process it has seen: its start (a pid reused is another process), its
    mount namespace and its pid in its own pid namespace (the registry's name)."""
    start_ticks: int
    mnt_ns: int
    ns_pid: int


@dataclass
class Candidate:
    pid: int                # the host's
    start_ticks: int


class Discovery:
    """The scans of one agent. `scan()` returns the processes whose registry is in their /dev/shm
    now, oldest first (a parent before the children it forked)."""

    def __init__(self):
        self.seen: Dict[int, Seen] = {}
        self.own_mnt = os.stat("/proc/self/ns/mnt").st_ino
        self.unreadable = 0         # processes whose namespaces could not be read (counted, not guessed)

    def _look(self, pid: int) -> Optional[Seen]:
        try:
            ticks = proc_start_ticks(pid)
        except (OSError, ValueError, IndexError):
            return None             # gone
        s = self.seen.get(pid)
        if s is not None and s.start_ticks == ticks:
            return s
        try:
            s = Seen(ticks, os.stat(f"/proc/{pid}/ns/mnt").st_ino, ns_pid(pid))
        except PermissionError:
            self.unreadable += 1
            return None
        except (OSError, ValueError):
            return None
        self.seen[pid] = s
        return s

    def scan(self) -> List[Candidate]:
        pids = [int(n) for n in os.listdir("/proc") if n.isdigit()]
        live = set(pids)
        for gone in [p for p in self.seen if p not in live]:
            del self.seen[gone]
        self.unreadable = 0
        by_ns: Dict[int, List[Tuple[int, Seen]]] = {}
        for pid in pids:
            s = self._look(pid)
            if s is not None:
                by_ns.setdefault(s.mnt_ns, []).append((pid, s))
        out: List[Candidate] = []
        for mnt, procs in by_ns.items():
            names = self._registries(mnt, procs)
            if not names:
                continue
            out += [Candidate(pid, s.start_ticks) for pid, s in procs if s.ns_pid in names]
        out.sort(key=lambda c: (c.start_ticks, c.pid))
        return out

    def _registries(self, mnt: int, procs: List[Tuple[int, Seen]]) -> set:
        """The own pids that name a registry in this mount namespace's /dev/shm."""
        dirs = [REGISTRY_DIR] if mnt == self.own_mnt else [f"/proc/{pid}/root{REGISTRY_DIR}" for pid, _ in procs[:3]]
        for d in dirs:
            try:
                names = os.listdir(d)
            except OSError:
                continue                # no /dev/shm there, or this process went: the next of its namespace
            return {int(n[len(REGISTRY_NAME):]) for n in names
                    if n.startswith(REGISTRY_NAME) and n[len(REGISTRY_NAME):].isdigit()}
        return set()
