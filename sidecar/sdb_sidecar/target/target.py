"""Finding a target process and its registry, with a clear error for everything that can be wrong."""
from __future__ import annotations

import errno
import os
import stat
import time
from dataclasses import dataclass
from typing import Optional

from sdb_trace.registry_h import (SDB_REGISTRY_MAGIC, SDB_REGISTRY_PREFIX, SDB_REGISTRY_VERSION, SDB_STATUS_DISABLED,
                                  SDB_STATUS_ENABLED, SDB_STATUS_STARTING)

from ..sampler import _registry
from ..errors import Exit, SdbError

MAGIC = SDB_REGISTRY_MAGIC.encode("latin-1")    # the header's 8 bytes, NULs included
PERMISSION_HINT = ("sdb-sidecar needs CAP_SYS_PTRACE (root has it unless it was dropped, as in a container: "
                   "add it) or to run as the app's own user (with kernel.yama.ptrace_scope=1 a non-root "
                   "user may only read its own children: use `sdb-sidecar record -- CMD`)")
# the registry is a 0600 file of the app's user, opened read-only: root reads it with CAP_DAC_READ_SEARCH
REGISTRY_HINT = ("the registry is the app's user's alone (mode 600): sdb-sidecar needs to run as that user, or "
                 "as root with CAP_DAC_READ_SEARCH (root has it unless it was dropped, as in a container: add it)")


@dataclass
class Target:
    pid: int                    # in our pid namespace (the host's, for an app in a container)
    registry: "_registry.Registry"
    info: dict
    command: list
    registry_ino: int = 0       # the registry file's inode (process.execd_another: did the app exec?)
    ns_pid: int = 0             # the app's own pid in its pid namespace (= pid when it shares ours)
    task_dir: str = ""          # procfs directory of its threads by the tids the registry holds ("": none)

    @property
    def ruby(self) -> str:
        return self.info["ruby"]

    @property
    def service(self) -> Optional[str]:
        """The service name the app gave (SDB_SERVICE_NAME, else OTEL_SERVICE_NAME), read by its gem at
        require and published in its registry: never from the process's environment. None: none."""
        return self.info.get("service")


def registry_path(pid: int) -> str:
    return f"{SDB_REGISTRY_PREFIX}{pid}"


@dataclass
class Place:
    """Where a process is, seen from here: its pid in its own pid namespace (the gem names its
    registry by that pid), and the path of that registry as this process can open it."""
    pid: int
    ns_pid: int
    registry: str
    own_namespaces: bool        # the app has its own pid or mount namespace (a container)


def ns_pid(pid: int) -> int:
    """The process's pid in its innermost pid namespace (NSpid in /proc/PID/status: the pid in each
    namespace from ours down to its own); `pid` when there is no NSpid line."""
    with open(f"/proc/{pid}/status", "rb") as f:
        for line in f:
            if line.startswith(b"NSpid:"):
                return int(line.split()[-1])
    return pid


def same_mount_namespace(pid: int) -> bool:
    """The process sees the files we see (its mount namespace is ours). Reading another process's
    namespace link needs the right to read its memory: PermissionError then."""
    return os.stat("/proc/self/ns/mnt").st_ino == os.stat(f"/proc/{pid}/ns/mnt").st_ino


def place_of(pid: int) -> Place:
    """A process in our namespaces has its registry at /dev/shm/sdb-PID; one in a container (its own
    pid namespace, its own mounts and /dev/shm) at /dev/shm/sdb-<its own pid> in its own mounts,
    which /proc/PID/root reaches from here."""
    own = ns_pid(pid)
    if own == pid and same_mount_namespace(pid):
        return Place(pid, own, registry_path(pid), False)
    return Place(pid, own, f"/proc/{pid}/root{registry_path(own)}", True)


def task_dir_of(place: Place) -> str:
    """The procfs directory that lists the process's threads by the tids its registry holds (those
    of its own pid namespace): /proc/PID/task here; for a container, the task directory of its own
    procfs, if it has one showing this very process (same start time and command name), else ""."""
    if not place.own_namespaces or place.ns_pid == place.pid:
        return f"/proc/{place.pid}/task"
    theirs = f"/proc/{place.pid}/root/proc/{place.ns_pid}"
    try:
        with open(f"/proc/{place.pid}/stat", "rb") as f:
            ours_stat = f.read()
        with open(f"{theirs}/stat", "rb") as f:
            their_stat = f.read()
    except OSError:
        return ""

    def ident(stat_line: bytes):
        close = stat_line.rindex(b")")
        return stat_line[stat_line.index(b"(") + 1:close], stat_line[close + 2:].split()[19]

    try:
        return f"{theirs}/task" if ident(ours_stat) == ident(their_stat) else ""
    except (ValueError, IndexError):
        return ""


def proc_start_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read()
    # comm may hold spaces and parentheses: the fields start after the last ')'
    fields = data[data.rindex(b")") + 2:].split()
    return int(fields[19])  # field 22 overall; fields[0] is field 3


def command_line(pid: int) -> list:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def is_ruby(pid: int) -> bool:
    """True if the process runs a Ruby interpreter (libruby mapped, or a ruby executable)."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                name = line.rsplit(None, 1)[-1] if line.count(" ") >= 5 else ""
                base = os.path.basename(name)
                if base.startswith("libruby") or base.startswith("ruby"):
                    return True
    except OSError:
        pass
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe")).startswith("ruby")
    except OSError:
        return False


def process_exists(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


STARTING_POLL_S = 0.002      # how often a registry still starting is looked at again


def open_target(pid: int, wait_s: float = 2.0) -> Target:
    """Check everything about `pid` and its registry; raise SdbError with the reason otherwise.

    wait_s: how long to wait for a registry that is still being set up (an app that is
    just starting, e.g. under `record`)."""
    if pid <= 0 or not process_exists(pid):
        raise SdbError(f"no process with pid {pid}", Exit.NO_SUCH_PROCESS)
    try:
        place = place_of(pid)
    except PermissionError:
        raise SdbError(f"not allowed to see the namespaces of process {pid}: {PERMISSION_HINT}",
                       Exit.PERMISSION) from None
    except (OSError, ValueError):
        raise SdbError(f"no process with pid {pid}", Exit.NO_SUCH_PROCESS) from None
    path = place.registry
    deadline = time.monotonic() + wait_s
    while True:
        try:
            st = os.lstat(path)
            break
        except FileNotFoundError:
            if time.monotonic() >= deadline or not is_ruby(pid):
                _no_registry(pid, path, stale=False)
            time.sleep(0.05)
        except PermissionError:
            raise SdbError(f"cannot look up {path}: permission denied; {PERMISSION_HINT}", Exit.PERMISSION) from None
    try:
        owner = os.stat(f"/proc/{pid}").st_uid
    except FileNotFoundError:
        raise SdbError(f"no process with pid {pid}", Exit.NO_SUCH_PROCESS) from None
    if not stat.S_ISREG(st.st_mode):
        raise SdbError(f"{path} is not a regular file: refusing it", Exit.FOREIGN_REGISTRY)
    if st.st_uid != owner:
        raise SdbError(f"{path} is owned by uid {st.st_uid}, but process {pid} runs as uid {owner}: "
                       f"refusing a registry the app did not write", Exit.FOREIGN_REGISTRY)
    if st.st_mode & 0o077:
        raise SdbError(f"{path} is accessible to other users (mode {stat.S_IMODE(st.st_mode):o}): "
                       f"refusing it", Exit.FOREIGN_REGISTRY)
    try:
        reg = _registry.Registry(path)
    except FileNotFoundError:
        _no_registry(pid, path, stale=False)        # removed since the lstat: the process is ending
    except PermissionError:
        raise SdbError(f"cannot read {path}: permission denied; {REGISTRY_HINT}", Exit.PERMISSION) from None
    except _registry.RegistryError as e:
        raise SdbError(str(e), Exit.REGISTRY_FORMAT) from None
    if reg.magic != MAGIC:
        raise SdbError(f"{path} is not an sdb registry (bad magic)", Exit.REGISTRY_FORMAT)
    if reg.version != SDB_REGISTRY_VERSION:
        raise SdbError(f"{path} has registry format {reg.version}; this sdb-sidecar reads format "
                       f"{SDB_REGISTRY_VERSION}: use the sdb-sidecar that matches the app's sdb gem",
                       Exit.REGISTRY_FORMAT)
    try:
        reg.check()
    except _registry.RegistryError as e:
        raise SdbError(str(e), Exit.REGISTRY_FORMAT) from None
    info = reg.info
    try:
        ticks = proc_start_ticks(pid)
    except (OSError, ValueError, IndexError):
        raise SdbError(f"no process with pid {pid}", Exit.NO_SUCH_PROCESS) from None
    if info["pid"] != place.ns_pid or info["proc_start_ticks"] != ticks:
        _no_registry(pid, path, stale=True)
    while info["status"] == SDB_STATUS_STARTING and time.monotonic() < deadline:
        # the gem finishes starting within a few ms of creating its file: a 50 ms wait here put
        # `record`'s first sample 50 ms after the program's first line whenever it looked that early
        time.sleep(STARTING_POLL_S)
        info = reg.info
    if info["status"] == SDB_STATUS_DISABLED:
        raise SdbError(f"the sdb gem in process {pid} disabled itself: {info['disabled_reason']}",
                       Exit.GEM_DISABLED)
    if info["status"] != SDB_STATUS_ENABLED:
        raise SdbError(f"the sdb gem in process {pid} has not finished starting (status {info['status']})",
                       Exit.GEM_DISABLED)
    return Target(pid=pid, registry=reg, info=info, command=command_line(pid), registry_ino=st.st_ino,
                  ns_pid=place.ns_pid, task_dir=task_dir_of(place))


def _no_registry(pid: int, path: str, stale: bool):
    if not process_exists(pid):
        raise SdbError(f"no process with pid {pid}", Exit.NO_SUCH_PROCESS)
    if not is_ruby(pid):
        name = command_line(pid)[:1] or ["?"]
        raise SdbError(f"process {pid} ({os.path.basename(name[0])}) is not a Ruby process", Exit.NOT_RUBY)
    why = f"{path} was left by an earlier process" if stale else f"{path} does not exist"
    raise SdbError(f"process {pid} is Ruby but not running the sdb gem ({why}): add `require \"sdb\"` "
                   f"to the app (or start it with `ruby -rsdb`) and restart it", Exit.NO_GEM)


def check_readable(pid: int, registry, sampler) -> None:
    """Fails early, with the reason, when this process may not read the target's memory at all.
    One word of the first thread's execution context is read: a refusal (EPERM, EACCES) or a gone
    process (ESRCH) ends the attach here. Any other failure (EFAULT: the slot changed while read)
    says nothing about permissions; the sampler counts such reads as torn."""
    threads = registry.threads()
    if not threads:
        return
    try:
        sampler.read_memory(threads[0]["ec_addr"], 8)
    except OSError as e:
        if e.errno in (errno.EPERM, errno.EACCES, errno.ESRCH):
            raise permission_error(pid, e) from None


def permission_error(pid: int, e: OSError) -> SdbError:
    if e.errno == errno.EPERM or e.errno == errno.EACCES:
        return SdbError(f"not allowed to read the memory of process {pid}: {PERMISSION_HINT}", Exit.PERMISSION)
    if e.errno == errno.ESRCH:
        return SdbError(f"process {pid} exited", Exit.NO_SUCH_PROCESS)
    return SdbError(f"cannot read process {pid}: {e}", Exit.FAILED)
