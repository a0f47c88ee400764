"""Uprobes that come out of the target without stalling it.

Taking a uprobe out is what the governor does at every pause, while the app is (by definition) hitting
it fast. Two kernel waits made the app stall then (seen with perf on 6.18: the Ruby asleep in
`handler_chain` -> `down_read` for 10-30 ms at each pause of a boot):
- bcc's probes are perf events with the program attached to them; closing one first detaches the
  program, which waits an RCU-tasks-trace grace period (~35 ms), and only then removes the breakpoint;
- removing a breakpoint takes the uprobe's lock, which every hit takes too, and then the kernel's
  `dup_mmap_sem`, whose first writer in a while waits an RCU grace period for it: the app's hits queue
  on the lock all that time.

So the creation probes are attached here as `uprobe_multi` BPF links (Linux 6.6+; one link per probe,
for the target process alone): closing such a link removes the breakpoint first and waits for the
grace periods after. And before a pause, `warm` makes a uprobe on a function of the sidecar's own that
is never called again: it pays the `dup_mmap_sem` grace period where nobody waits, and a removal
that follows within a grace period passes at once.

Plain syscalls through ctypes: bpf(BPF_LINK_CREATE), and perf_event_open on the uprobe PMU
(`/sys/bus/event_source/devices/uprobe`) for the warm-up probe."""
from __future__ import annotations

import ctypes
import os
import subprocess
from typing import List, Optional

_NR_PERF_EVENT_OPEN = 298          # x86_64
_NR_BPF = 321
_BPF_LINK_CREATE = 28
BPF_TRACE_UPROBE_MULTI = 48        # enum bpf_attach_type: the programs must be loaded with it
_BPF_F_UPROBE_MULTI_RETURN = 1
_PERF_FLAG_FD_CLOEXEC = 8
_PMU = "/sys/bus/event_source/devices/uprobe"

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _PerfAttr(ctypes.Structure):
    _fields_ = [("type", ctypes.c_uint32), ("size", ctypes.c_uint32), ("config", ctypes.c_uint64),
                ("sample_period", ctypes.c_uint64), ("sample_type", ctypes.c_uint64),
                ("read_format", ctypes.c_uint64), ("flags", ctypes.c_uint64),
                ("wakeup_events", ctypes.c_uint32), ("bp_type", ctypes.c_uint32),
                ("config1", ctypes.c_uint64), ("config2", ctypes.c_uint64), ("rest", ctypes.c_uint8 * 48)]


class _UprobeMultiAttr(ctypes.Structure):
    """union bpf_attr, as BPF_LINK_CREATE reads it for a uprobe_multi link."""
    _fields_ = [("prog_fd", ctypes.c_uint32), ("target_fd", ctypes.c_uint32), ("attach_type", ctypes.c_uint32),
                ("flags", ctypes.c_uint32), ("path", ctypes.c_uint64), ("offsets", ctypes.c_uint64),
                ("ref_ctr_offsets", ctypes.c_uint64), ("cookies", ctypes.c_uint64), ("cnt", ctypes.c_uint32),
                ("um_flags", ctypes.c_uint32), ("pid", ctypes.c_uint32), ("rest", ctypes.c_uint8 * 68)]


def _oserror(what: str) -> OSError:
    e = ctypes.get_errno()
    return OSError(e, f"{what}: {os.strerror(e)}")


class UprobeLink:
    """A BPF program (loaded with expected attach type BPF_TRACE_UPROBE_MULTI) on one uprobe (or
    uretprobe) at `offset` of the file at `path`, in process `pid` alone. close() removes it."""

    def __init__(self, path: str, offset: int, pid: int, prog_fd: int, retprobe: bool = False):
        cpath = ctypes.create_string_buffer(os.fsencode(path))
        offsets = (ctypes.c_uint64 * 1)(offset)
        attr = _UprobeMultiAttr(prog_fd=prog_fd, attach_type=BPF_TRACE_UPROBE_MULTI,
                                path=ctypes.cast(cpath, ctypes.c_void_p).value,
                                offsets=ctypes.cast(offsets, ctypes.c_void_p).value, cnt=1,
                                um_flags=_BPF_F_UPROBE_MULTI_RETURN if retprobe else 0, pid=pid)
        fd = _libc.syscall(_NR_BPF, _BPF_LINK_CREATE, ctypes.byref(attr), ctypes.sizeof(attr))
        if fd < 0:
            raise _oserror(f"uprobe_multi link on {path}:{offset:#x}")
        self.fd: Optional[int] = int(fd)

    def close(self) -> None:
        """The breakpoint comes out first; then this waits ~0.1-0.2 s for the kernel's grace periods
        (unless another process holds the link too: see close_elsewhere)."""
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)


def open_uprobe(path: str, offset: int, pid: int) -> int:
    """A perf event (without program) for a uprobe at `offset` of the file at `path`, in process `pid`.
    Returns its fd: the probe lives until the fd is closed."""
    with open(f"{_PMU}/type") as f:
        pmu_type = int(f.read())
    cpath = ctypes.create_string_buffer(os.fsencode(path))
    attr = _PerfAttr(type=pmu_type, size=ctypes.sizeof(_PerfAttr), sample_period=1, wakeup_events=1,
                     config1=ctypes.cast(cpath, ctypes.c_void_p).value, config2=offset)
    fd = _libc.syscall(_NR_PERF_EVENT_OPEN, ctypes.byref(attr), pid, -1, -1, _PERF_FLAG_FD_CLOEXEC)
    if fd < 0:
        raise _oserror(f"perf_event_open(uprobe {path}:{offset:#x})")
    return int(fd)


def warm(path: str, offset: int) -> Optional[int]:
    """A uprobe on a function of this process that is never called again (`path`, `offset`): pays the
    kernel's grace period for uprobe (un)registrations now, so that a removal following within a grace
    period does not wait with the probe's lock held. Returns the fd to close later (closing waits, in
    the kernel, for grace periods: do it where nobody waits). None if it could not be made."""
    try:
        return open_uprobe(path, offset, os.getpid())
    except OSError:
        return None


def close_elsewhere(links: List[UprobeLink]) -> List[UprobeLink]:
    """Close `links` without waiting for the kernel's grace periods, for processes that are gone
    (nothing can hit their probes, nobody gains from the wait): a short-lived `cat` gets the links'
    fds, this process closes its own (no longer the last: at once), then ends cat's input; cat's
    exit is the last close and pays the ~0.1-0.2 s, while `record` exits. Returns the links it could
    not hand over (no `cat` here), for the caller to close itself."""
    fds = [link.fd for link in links if link.fd is not None]
    if not fds:
        return []
    try:
        keeper = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, pass_fds=fds)
    except OSError:
        return links
    for link in links:
        link.close()
    keeper.stdin.close()            # EOF: cat exits and its exit takes the links with it
    return []
