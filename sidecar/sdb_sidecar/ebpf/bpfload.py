"""Loading eBPF programs with bcc: where bcc comes from (the distribution's Python module), whether
this machine can run them at all, where the programs' sources are, and the compile's priority.
`symbolizer.py` (the ISeq symbolizer) and `kview.py` (Ruby 3.1's kernel view) load theirs through it."""
from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import mmap
import os
import sys
import threading
from pathlib import Path
from typing import Optional


def bpf_source(name: str) -> str:
    """The text of an eBPF program (bpf/NAME): shipped inside the package (sdb_sidecar/ebpf/bpf/, as a
    wheel installs it: pyproject.toml maps bpf/ there), or in the source tree's bpf/."""
    here = Path(__file__).resolve().parent
    for d in (here / "bpf", here.parents[2] / "bpf"):
        if (d / name).is_file():
            return (d / name).read_text()
    raise EbpfUnavailable(f"the eBPF program {name} is missing from this installation ({here / 'bpf'})")


# bcc compiles the program with clang in this thread: about a second of CPU, while the app may be
# booting on the same cores. At this niceness the app's threads (nice 0) get ~10x its share when
# they compete; on an idle core it runs as fast. Sampling does not wait for it (hub.EbpfHub).
COMPILE_NICE = 10
# ... but not for ever: an app that keeps every core busy (puma workers under load, a CPU-bound
# tree) leaves a nice-10 compile ~10 % of a CPU, and a recording of a few seconds ended before its
# names came. A compile still running after this long (wall time) goes on at the app's priority.
COMPILE_PATIENCE_S = 2.0


@contextlib.contextmanager
def lowered_priority(nice: int, patience_s: Optional[float] = None):
    """This thread alone (Linux: a thread's own niceness) at `nice` or lower priority, then back
    (raising it back needs CAP_SYS_NICE, which eBPF's root has; without it the thread stays nicer).
    patience_s: if the block still runs after that many seconds, the thread is put back to its own
    priority from then on (a timer thread does it)."""
    tid = threading.get_native_id()
    try:
        old = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, max(old, nice))
    except OSError:
        old = None
    lock, over = threading.Lock(), [False]

    def restore():
        with lock:
            if not over[0]:
                over[0] = True
                try:
                    os.setpriority(os.PRIO_PROCESS, tid, old)
                except OSError:
                    pass
    timer = None
    if old is not None and patience_s is not None and max(old, nice) != old:
        timer = threading.Timer(patience_s, restore)
        timer.name = "sdb-compile-patience"
        timer.daemon = True
        timer.start()
    try:
        yield
    finally:
        if timer is not None:
            timer.cancel()
        if old is not None:
            restore()


# bcc's compile (clang, LLVM) is not safe to run in two threads at once: two programs compiled
# together crash the process. Every program of this process is compiled under this lock. It also
# changes the process's working directory while it runs (to the kernel's headers): the commands
# resolve their paths before any compile starts.
COMPILE_LOCK = threading.Lock()
COMPILE_THREADS: list = []      # every thread started to compile a program (compiling() asks about them)


def compiling() -> bool:
    """A thread of this process still compiles (or attaches) an eBPF program."""
    return any(t.is_alive() for t in COMPILE_THREADS)


def compile_bpf(BPF, text: str, cflags: list, nice: int = COMPILE_NICE, patience_s: float = COMPILE_PATIENCE_S):
    """bcc's BPF(text, cflags), one compile at a time, at `nice` (COMPILE_NICE unless told) for its
    first patience_s seconds, at this thread's own priority after."""
    with COMPILE_LOCK, lowered_priority(nice, patience_s):
        return BPF(text=text, cflags=cflags)


class EbpfUnavailable(Exception):
    """eBPF cannot be used for this target; the message says why."""


DISTRO_BCC = ("/usr/lib/python3/dist-packages/bcc", "/usr/lib/python3/site-packages/bcc")


LIBBCC = "libbcc.so.0"


def _load_libbcc() -> None:
    """libbcc loaded by a call to dlopen through ctypes, which lets go of the GIL while it runs, so
    that bcc's own `ctypes.CDLL("libbcc.so.0")` finds it loaded. ctypes.CDLL holds the GIL through
    dlopen, and libbcc carries LLVM: its relocations took 44-775 ms of holding it on this VM beside
    a CPU hog (every Python thread of the sidecar waits then: the drains, the look for new
    processes, a new sampler's start: a child found during it lost its first ~0.7 s of samples on a
    loaded machine). The handle is never closed: bcc keeps the library for the process's life anyway.
    Nothing is done if dlopen cannot be called or fails (bcc's import then says why)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        dlopen = libc.dlopen
        dlopen.restype = ctypes.c_void_p
        dlopen.argtypes = [ctypes.c_char_p, ctypes.c_int]
        dlopen(LIBBCC.encode(), os.RTLD_NOW)
    except (OSError, AttributeError):
        pass


def _import_bcc():
    """bcc's BPF class. bcc's Python module comes with the distribution's bcc (Debian: python3-bpfcc)
    and lives outside any virtualenv: if it cannot be imported as it is, the distribution's copy is
    loaded by its path, alone (the rest of the system's packages stay out of this process's path)."""
    if "bcc" not in sys.modules:
        _load_libbcc()
    try:
        from bcc import BPF
        return BPF
    except ImportError:
        pass
    for d in DISTRO_BCC:
        init = os.path.join(d, "__init__.py")
        if os.path.isfile(init):
            spec = importlib.util.spec_from_file_location("bcc", init, submodule_search_locations=[d])
            module = importlib.util.module_from_spec(spec)
            sys.modules["bcc"] = module
            try:
                spec.loader.exec_module(module)
                return module.BPF
            except Exception as e:
                sys.modules.pop("bcc", None)
                raise EbpfUnavailable(f"bcc's Python module ({d}) does not load: {e}") from None
    raise EbpfUnavailable("the bcc Python module is not installed (Debian: python3-bpfcc)")


def check_available() -> None:
    """Cheap checks before compiling anything."""
    if os.geteuid() != 0:
        raise EbpfUnavailable("not running as root")
    if not os.path.exists("/sys/bus/event_source/devices/uprobe"):
        raise EbpfUnavailable("the kernel has no uprobes")
    if not os.path.exists(f"/lib/modules/{os.uname().release}/build"):
        raise EbpfUnavailable(f"no kernel headers for {os.uname().release} (/lib/modules/.../build)")
    _import_bcc()


class MappedProgram:
    """A loaded program whose BPF_F_MMAPABLE array is mapped into this process (its `address`, for
    the sampler) and whose hash `TARGETS` (tgid -> ...) holds the processes it serves: the kernel
    view and the in-context reads. close() when no sampler reads the array any more."""

    TARGETS = "targets"
    WHAT = "the program"

    def __init__(self):
        self._bpf = None
        self._map: Optional[mmap.mmap] = None
        self.address = 0
        self.pids: set = set()

    def _map_array(self, name: str, nbytes: int) -> None:
        try:
            fd = self._bpf[name].map_fd
            self._map = mmap.mmap(fd, nbytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except (OSError, ValueError) as e:
            self.close()
            raise EbpfUnavailable(f"cannot map {self.WHAT}: {e}") from None
        self.address = ctypes.addressof(ctypes.c_char.from_buffer(self._map))

    def remove(self, pid: int) -> None:
        if self._bpf is None or pid not in self.pids:
            return
        self.pids.discard(pid)
        targets = self._bpf[self.TARGETS]
        try:
            del targets[targets.Key(pid)]
        except KeyError:
            pass

    def close(self) -> None:
        """Detach the program. No sampler may read the array any more (the memory goes with it)."""
        self.address = 0
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:
                pass        # a ctypes view is alive: the mapping goes with the process
            self._map = None
        if self._bpf is not None:
            self._bpf.cleanup()
            self._bpf = None
