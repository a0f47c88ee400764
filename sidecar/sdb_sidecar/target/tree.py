"""A process and its descendants, as procfs shows them from outside (nothing is asked of the processes):
who is whose child, and what each one calls itself (its command line, which a process title such as
puma's `puma: cluster worker 0: 812 [app]` rewrites)."""
from __future__ import annotations

import os
from typing import Dict, List, Optional


def children_of(pid: int) -> List[int]:
    """The children of a process: those of each of its threads (/proc/PID/task/TID/children, where
    the kernel has it), else by a scan of every process's parent; [] when it is gone."""
    kids: List[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                kids += [int(x) for x in f.read().split()]
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue                # the thread ended meanwhile
            return [p for p, pp in parents().items() if pp == pid]     # no such file in this kernel
        except (OSError, ValueError):
            continue
    return kids


def parents() -> Dict[int, int]:
    """Every process's parent (pid -> ppid), from /proc/*/stat."""
    out: Dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            pp = parent_of(int(name))
            if pp is not None:
                out[int(name)] = pp
    return out


def parent_of(pid: int) -> Optional[int]:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return int(data[data.rindex(b")") + 2:].split()[1])     # field 4, after the state letter
    except (OSError, ValueError, IndexError):
        return None


def descendants(root: int) -> List[int]:
    """Every live descendant of root, parents before their children."""
    out: List[int] = []
    todo = [root]
    seen = {root}
    while todo:
        pid = todo.pop(0)
        for kid in children_of(pid):
            if kid not in seen:
                seen.add(kid)
                out.append(kid)
                todo.append(kid)
    return out


class DirectoryWatch:
    """Wakes a waiter when a file is created in (or moved into) a directory: a process of the tree
    published its registry (/dev/shm/sdb-PID). inotify, through libc; `fd` is -1 where it cannot be
    had (the caller then looks every now and then)."""

    IN_CREATE, IN_MOVED_TO, IN_NONBLOCK, IN_CLOEXEC = 0x100, 0x80, 0o4000, 0o2000000

    def __init__(self, path: str):
        self.fd = -1
        try:
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(self.IN_NONBLOCK | self.IN_CLOEXEC)
            if fd < 0:
                return
            if libc.inotify_add_watch(fd, os.fsencode(path), self.IN_CREATE | self.IN_MOVED_TO) < 0:
                os.close(fd)
                return
            self.fd = fd
        except (OSError, AttributeError):
            self.fd = -1

    def names(self) -> List[str]:
        """The names created since the last call (the events are read and gone)."""
        out: List[str] = []
        if self.fd < 0:
            return out
        while True:
            try:
                data = os.read(self.fd, 65536)
            except (BlockingIOError, OSError):
                return out
            if not data:
                return out
            pos = 0
            while pos + 16 <= len(data):    # struct inotify_event: wd, mask, cookie, len, name[len]
                n = int.from_bytes(data[pos + 12:pos + 16], "little")
                out.append(data[pos + 16:pos + 16 + n].rstrip(b"\0").decode(errors="replace"))
                pos += 16 + n

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
