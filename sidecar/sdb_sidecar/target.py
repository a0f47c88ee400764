"""Finding a target process and its registry, with a clear error for everything that can be wrong."""
from __future__ import annotations

import errno
import os
import stat
import time
from dataclasses import dataclass

from . import _sampler
from .errors import Exit, SdbError

REGISTRY_PREFIX = "/dev/shm/sdb-"
MAGIC = b"SDBREG\0\0"
REGISTRY_VERSION = 1
STATUS_STARTING, STATUS_ENABLED, STATUS_DISABLED = 0, 1, 2
PERMISSION_HINT = ("run sdb-sidecar as the same user as the app, as root, or with CAP_SYS_PTRACE "
                   "(with kernel.yama.ptrace_scope=1 a non-root user may only read its own children: "
                   "use `sdb-sidecar record -- CMD`)")


@dataclass
class Target:
    pid: int
    registry: "_sampler.Registry"
    info: dict
    command: list
    registry_ino: int = 0       # the registry file's inode (process.execd_another: did the app exec?)

    @property
    def ruby(self) -> str:
        return self.info["ruby"]


def registry_path(pid: int) -> str:
    return f"{REGISTRY_PREFIX}{pid}"


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


def open_target(pid: int, wait_s: float = 2.0) -> Target:
    """Check everything about `pid` and its registry; raise SdbError with the reason otherwise.

    wait_s: how long to wait for a registry that is still being set up (an app that is
    just starting, e.g. under `record`)."""
    if pid <= 0 or not process_exists(pid):
        raise SdbError(f"no process with pid {pid}", Exit.NO_SUCH_PROCESS)
    path = registry_path(pid)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            st = os.lstat(path)
            break
        except FileNotFoundError:
            if time.monotonic() >= deadline or not is_ruby(pid):
                _no_registry(pid, path, stale=False)
            time.sleep(0.05)
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
        reg = _sampler.Registry(path)
    except PermissionError:
        raise SdbError(f"cannot read {path}: permission denied; {PERMISSION_HINT}", Exit.PERMISSION) from None
    except _sampler.RegistryError as e:
        raise SdbError(str(e), Exit.REGISTRY_FORMAT) from None
    if reg.magic != MAGIC:
        raise SdbError(f"{path} is not an sdb registry (bad magic)", Exit.REGISTRY_FORMAT)
    if reg.version != REGISTRY_VERSION:
        raise SdbError(f"{path} has registry format {reg.version}; this sdb-sidecar reads format "
                       f"{REGISTRY_VERSION}: use the sdb-sidecar that matches the app's sdb gem",
                       Exit.REGISTRY_FORMAT)
    try:
        reg.check()
    except _sampler.RegistryError as e:
        raise SdbError(str(e), Exit.REGISTRY_FORMAT) from None
    info = reg.info
    try:
        ticks = proc_start_ticks(pid)
    except (OSError, ValueError, IndexError):
        raise SdbError(f"no process with pid {pid}", Exit.NO_SUCH_PROCESS) from None
    if info["pid"] != pid or info["proc_start_ticks"] != ticks:
        _no_registry(pid, path, stale=True)
    while info["status"] == STATUS_STARTING and time.monotonic() < deadline:
        time.sleep(0.05)
        info = reg.info
    if info["status"] == STATUS_DISABLED:
        raise SdbError(f"the sdb gem in process {pid} disabled itself: {info['disabled_reason']}",
                       Exit.GEM_DISABLED)
    if info["status"] != STATUS_ENABLED:
        raise SdbError(f"the sdb gem in process {pid} has not finished starting (status {info['status']})",
                       Exit.GEM_DISABLED)
    return Target(pid=pid, registry=reg, info=info, command=command_line(pid), registry_ino=st.st_ino)


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
