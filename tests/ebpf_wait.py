"""Waiting for a recording's eBPF programs by the states the sidecar reports, not by a time.

bcc compiles them beside the sampling, at a low priority for its first seconds (bpfload.compile_bpf):
a second alone, a minute or more on a loaded machine. What the sidecar says of them:
- in the trace: `ebpf_attached` once the symbolizer is in, `kernel_view` once Ruby 3.1's view is;
- on stderr, once, when one will not come: `sdb: notice: no eBPF symbolizer (why)`, `... no kernel view
  of the threads (why)` (the compile failed, bcc or the kernel's headers are missing...);
- or it exits.
wait_for_ebpf waits for one of those. Its only time bound, EBPF_PATIENCE_S, ends a test whose sidecar
hangs: it is far beyond any compile seen on a loaded machine, and says what it waited for."""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Callable, Optional, Sequence, Union

import pytest

# A hung sidecar's test ends after this. The slowest compile seen: over 120 s, two sidecars compiling
# at once in a cold `make test` beside a heavier load.
EBPF_PATIENCE_S = 900.0

SYMBOLIZER_MISSING = ("sdb: notice: no eBPF symbolizer",)
KERNEL_VIEW_MISSING = ("sdb: notice: no kernel view",)
# what conftest.ebpf_all_in_so_far waits for, and the notices that say it will not come
EVERY_PROGRAM = "every eBPF program in (ebpf_attached, and on Ruby 3.1 kernel_view)"
ANY_MISSING = SYMBOLIZER_MISSING + KERNEL_VIEW_MISSING


class SidecarProcess(subprocess.Popen):
    """A background `sdb-sidecar` whose stderr goes to a file, so that what it said so far can be read
    while it runs (stderr_so_far: wait_for_ebpf looks there for its notices); communicate() still
    returns (stdout, all of stderr)."""

    def __init__(self, args, stderr_path: Path, **kw):
        self.stderr_path = Path(stderr_path)
        with open(self.stderr_path, "w") as err:
            super().__init__(args, stderr=err, **kw)

    def stderr_so_far(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""

    def communicate(self, input=None, timeout=None):
        out, _ = super().communicate(input, timeout)
        return out, self.stderr_so_far()


def _cpu_s(pid: int) -> Optional[float]:
    """User + system CPU seconds of a process so far (its ended threads included)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def wait_for_ebpf(sidecar: subprocess.Popen, ready: Union[str, Path, Callable[[], object]],
                  what: str = "the eBPF symbolizer attached (its ebpf_attached record)",
                  missing: Sequence[str] = SYMBOLIZER_MISSING, stderr: Optional[Callable[[], str]] = None,
                  patience_s: float = EBPF_PATIENCE_S, interval: float = 0.2):
    """Wait until ready() holds (a trace path: its ebpf_attached record) and return its value. Fails at
    once, saying why, when the sidecar exits first or says on stderr (a line starting with one of
    `missing`) that it will not come; after patience_s only if neither came (a hung sidecar), with
    the CPU it got meanwhile. stderr: what the sidecar said so far (a SidecarProcess knows it)."""
    if not callable(ready):
        from sdb_trace import has_record
        path = str(ready)
        ready = lambda: has_record(path, "ebpf_attached")      # noqa: E731
    said = stderr or getattr(sidecar, "stderr_so_far", None) or (lambda: "")
    t0, cpu0 = time.monotonic(), _cpu_s(sidecar.pid)
    while True:
        value = ready()
        if value:
            return value
        if sidecar.poll() is not None:
            pytest.fail(f"the sidecar exited ({sidecar.returncode}) before {what}; it said: {said()!r}")
        notices = [line for line in said().splitlines() if line.startswith(tuple(missing))]
        if notices:
            pytest.fail(f"{what} will not come, the sidecar said: {notices[0]}")
        waited = time.monotonic() - t0
        if waited >= patience_s:
            cpu = _cpu_s(sidecar.pid)
            ran = f"{cpu - cpu0:.1f} s of CPU" if cpu is not None and cpu0 is not None else "? s of CPU"
            pytest.fail(f"no sign of {what} after {waited:.0f} s: the sidecar (pid {sidecar.pid}) is alive, ran "
                        f"{ran} meanwhile, load average {os.getloadavg()[0]:.1f}, and said neither that it is in "
                        f"nor why not: {said()[-2000:]!r}")
        time.sleep(interval)
