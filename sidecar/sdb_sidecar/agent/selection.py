"""--include/--exclude: which processes the agent records, by shell-style patterns (fnmatch) on the
service name or a cgroup path (the process's v2 path or any v1 hierarchy's). With an --include, only
processes one of them matches; an --exclude that matches leaves a process out, whatever --include says."""
from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Sequence


class Selection:
    def __init__(self, include: Sequence[str] = (), exclude: Sequence[str] = ()):
        self.include, self.exclude = list(include), list(exclude)

    @staticmethod
    def _any(patterns, service: str, cgroups: Sequence[str]) -> bool:
        return any(fnmatchcase(service, p) or any(fnmatchcase(c, p) for c in cgroups) for p in patterns)

    def wants(self, service: str, cgroups: Sequence[str]) -> bool:
        if self.include and not self._any(self.include, service, cgroups):
            return False
        return not self._any(self.exclude, service, cgroups)
