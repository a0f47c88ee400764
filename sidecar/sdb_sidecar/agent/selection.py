"""--include/--exclude: which processes the agent records, by shell-style patterns (fnmatch) on the
service name or the cgroup path. With an --include, only processes one of them matches; an --exclude
that matches leaves a process out, whatever --include says."""
from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Sequence


class Selection:
    def __init__(self, include: Sequence[str] = (), exclude: Sequence[str] = ()):
        self.include, self.exclude = list(include), list(exclude)

    @staticmethod
    def _any(patterns, service: str, cgroup: str) -> bool:
        return any(fnmatchcase(service, p) or (cgroup and fnmatchcase(cgroup, p)) for p in patterns)

    def wants(self, service: str, cgroup: str) -> bool:
        if self.include and not self._any(self.include, service, cgroup):
            return False
        return not self._any(self.exclude, service, cgroup)
