"""A process's container and Kubernetes pod, from its cgroup path (/proc/PID/cgroup: no call to a
container runtime or to the Kubernetes API). The runtimes name a container's cgroup after its id
(64 hex digits) and the kubelet a pod's after its uid:
  docker:      /docker/<id> (cgroupfs), /system.slice/docker-<id>.scope (systemd)
  containerd:  .../cri-containerd-<id>.scope (systemd), /kubepods/<qos>/pod<uid>/<id> (cgroupfs)
  cri-o:       .../crio-<id>.scope (crio-conmon-<id>.scope is its monitor's, not the container's)
  podman:      .../libpod-<id>.scope
  kubelet:     kubepods-<qos>-pod<uid with _ for ->.slice (systemd), pod<uid> (cgroupfs)
A path that matches none names no container: nothing is guessed (a wrong label is worse than none)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Tuple

_CONTAINER = re.compile(r"^(?:docker-|cri-containerd-|crio-|libpod-)?([0-9a-f]{64})(?:\.scope)?$")
_POD = re.compile(r"(?:^|-)pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})(?:\.slice)?$")


@dataclass(frozen=True)
class Cgroup:
    paths: Tuple[str, ...]          # the cgroup v2 path first, then each v1 hierarchy's ((): unknown)
    container_id: Optional[str]
    pod_uid: Optional[str]

    def labels(self) -> dict:
        """The trace header's keys for them (those known)."""
        return {k: v for k, v in (("container_id", self.container_id), ("pod_uid", self.pod_uid)) if v}


def parse(text: str) -> Cgroup:
    """/proc/PID/cgroup's text: `0::/path` (v2) or `N:controllers:/path` lines (v1)."""
    paths = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            if parts[0] == "0" and parts[1] == "":
                paths.insert(0, parts[2])
            else:
                paths.append(parts[2])
    container = pod = None
    for p in paths:
        for part in p.split("/"):
            m = _CONTAINER.match(part)
            if m and container is None:
                container = m.group(1)
            m = _POD.search(part)
            if m and pod is None:
                pod = m.group(1).replace("_", "-")
        if container is not None:
            break
    return Cgroup(tuple(dict.fromkeys(paths)), container, pod)


def cgroup_of(pid: int) -> Cgroup:
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8", errors="replace") as f:
            return parse(f.read())
    except OSError:
        return Cgroup((), None, None)
