"""What the sidecar knows of the target process from outside: whether it still runs, is on its way
out, or exec'd another program (procfs and pidfds; nothing is asked of the process itself)."""
from __future__ import annotations

import os
import select

from sdb_trace.registry_h import SDB_REGISTRY_PREFIX

_PIDFDS: dict = {}
_REGISTRY_PREFIX = SDB_REGISTRY_PREFIX.encode()     # as /proc/PID/maps shows the registry's path


def pidfd(pid: int) -> int:
    """A pidfd for pid (readable once it has exited), kept open; -1 where the kernel has none
    (or it is gone)."""
    fd = _PIDFDS.get(pid)
    if fd is None:
        fd = -1
        if hasattr(os, "pidfd_open"):
            try:
                fd = os.pidfd_open(pid)
            except OSError:
                return -1               # gone, or no pidfds here (or not allowed): the slow way
        _PIDFDS[pid] = fd
    return fd


def forget(pid: int) -> None:
    """Close pid's pidfd (its recording is over: a tree's recording that runs for days sees many
    processes come and go)."""
    fd = _PIDFDS.pop(pid, None)
    if fd is not None and fd >= 0:
        try:
            os.close(fd)
        except OSError:
            pass


def execd_another(pid: int, ino: int) -> bool:
    """The process exec'd another program: its memory map, read whole, holds mappings but none of its
    registry file (inode `ino`), and the process is not on its way out. A process that is exiting
    (a signal, exit()) has its memory released before it becomes a zombie: its maps then read empty,
    which is no exec. The kernel shows a process's map whole or not at all (the reader holds the
    map), so a non-empty one without the registry is a new program's."""
    try:
        with open(f"/proc/{pid}/maps", "rb") as f:
            data = f.read()
    except OSError:
        return False                    # gone
    if not data:
        return False                    # exiting: no memory any more
    for line in data.splitlines():
        parts = line.split(None, 5)
        try:
            if len(parts) == 6 and parts[5].startswith(_REGISTRY_PREFIX) and int(parts[4]) == ino:
                return False
        except ValueError:
            continue
    return not exiting(pid)


PF_EXITING = 0x4     # include/linux/sched.h: the task is in exit (its memory map may already be gone)


def exiting(pid: int) -> bool:
    """The process is gone, a zombie, or on its way out (/proc/PID/stat's flags)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        fields = data[data.rindex(b")") + 2:].split()
        return fields[0] in (b"Z", b"X") or bool(int(fields[6]) & PF_EXITING)
    except (OSError, ValueError, IndexError):
        return True


def alive(pid: int) -> bool:
    """The process still runs (not gone, not a zombie). Asked at every drain: through a pidfd
    (readable once the process has exited: one poll, ~1 us) where the kernel has them; else kill(0)
    and its state letter in /proc/PID/stat (~100 us with 8 threads: the kernel sums them all)."""
    fd = pidfd(pid)
    if fd >= 0:
        return not select.select([fd], [], [], 0)[0]
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie still answers kill(): look at its state
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return data[data.rindex(b")") + 2:data.rindex(b")") + 3] != b"Z"
    except OSError:
        return False
