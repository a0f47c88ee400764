"""In-context stack reads: the stacks of running threads copied on their own CPU, at a CPU tick.

A stack copied from another CPU while its thread runs changes during the copy; the sampler's
checks keep what both frame pointers hold, so a method whose calls are shorter than a copy (a few
us: most C functions, many small Ruby methods) loses its samples to its caller. `bpf/stack_in_context.c`,
run by a cpu-clock perf event on each recorded thread (threadtimers.py: it fires only while that
thread runs, every period of its running time, at the sampling rate, at most MAX_RATE_HZ), copies
the control frames, the ec's header and the top of the VM stack of a thread the sampler asked for
into the thread's slot of a BPF array mapped here (BPF_F_MMAPABLE,
`bpf/ctxslot.h`). The sampler takes a thread's newest such read at its own tick
(`Sampler.use_in_context`) and reads everything else from outside as before. The program only
reads; it runs in the interrupt of the target's CPU (the cost: benchmarks/RESULTS.md, in_context_cost).

The timers follow the registry's threads (`follow`, at each drain: the sampler wakes the drain loop
when a thread starts or ends while the reads are in): a thread is read from outside from its
appearance until its timer is in. A CPU that runs no recorded thread takes no interrupt from them.
At most MAX_TIMERS are open; threads beyond (or refused an event by the kernel) are read from
outside and counted (the end record's `in_context_untimed`).

The program knows no Ruby when compiled (each process's offsets are given when it is added), so
`record` compiles it while the program boots (`prepare`, then `take` when the registry appears).
Keyed by the kernel's tids: a target in another pid namespace (a container) is not read here
(its registry holds its own tids) and takes no timer.

Alternatives weighed (benchmarks/RESULTS.md, real_check_spread): keeping the stack at the first frame
pointer of a copy from outside, with a "(changed while read)" frame where the frames the thread left
fail a check, halved the bias on sub-us calls but gave 12 % of asciidoctor's samples to that frame
(C functions return within a copy), and stale frames of the same shape still passed the checks."""
from __future__ import annotations

import threading
from typing import Optional

from . import bpfload
from ..sampler._sampler import ctx_slot_size
from .bpfload import EbpfUnavailable, MappedProgram, _import_bcc, bpf_source, check_available, compile_bpf
from .threadtimers import ThreadTimers

CTX_SLOTS = 128                     # slot = tid & (CTX_SLOTS - 1)
# timers open at once, over every process recorded: each is an fd of the sidecar (whose other fds
# are few: maps, pidfds, the trace) and a perf event in the kernel (~1 KB, and a perf context on the
# thread); and beyond CTX_SLOTS threads share slots, of which one thread at a time is read in
# context, so a timer on more threads than slots would mostly interrupt threads it cannot read
MAX_TIMERS = CTX_SLOTS
OVERSAMPLE = 1.07
# the reads' rate never goes above this, whatever the sampling rate: each read is a timer interrupt
# on the thread's CPU, and on a virtual machine an interrupt costs the app ~25 us (a loop ran 1.3-1.4x
# slower with reads at 10 kHz, and 744x at 100 kHz, where the interrupts took the whole CPU:
# benchmarks/RESULTS.md, "The in-context reads' rate"). Above it a running thread is read in context
# at about this rate and from outside at the other ticks (the end record's in_context counts which)
MAX_RATE_HZ = 1000.0


def read_period_ns(rate_hz: float) -> int:
    """The cpu-clock period of the reads for a sampler ticking at rate_hz: OVERSAMPLE reads per tick up
    to MAX_RATE_HZ ticks a second, then MAX_RATE_HZ * OVERSAMPLE reads a second."""
    return int(1e9 / (min(rate_hz, MAX_RATE_HZ) * OVERSAMPLE))


class InContext(MappedProgram):
    """The program, its perf events and its array mapped here, for the processes added (a process
    tree shares one). `address` and `slots` are what Sampler.use_in_context takes. close() when no
    sampler reads it."""

    TARGETS = "ctx_targets"
    WHAT = "the in-context reads"

    def __init__(self, rate_hz: float):
        super().__init__()
        self.rate_hz = rate_hz
        self.slots = CTX_SLOTS
        self.timers: Optional[ThreadTimers] = None

    def start(self) -> None:
        check_available()
        BPF = _import_bcc()
        text = bpf_source("ctxslot.h") + "\n" + bpf_source("stack_in_context.c")
        try:
            # at the app's priority: ~0.35 s of CPU once. At COMPILE_NICE a CPU-bound app (puma
            # workers under load on every core) left it ~10 % of a CPU, and a recording of a few
            # seconds ended before it (and the symbolizer after it) was in
            self._bpf = compile_bpf(BPF, text, [f"-DCTX_SLOTS={CTX_SLOTS}"], nice=0)
            # a fixed period (cpu-clock counts the thread's ns on a CPU), OVERSAMPLE reads per sampler tick: the sampler
            # takes the newest read since a thread's last sample, and finds one at almost every
            # tick (a tick finds none in ~1 of 1,000); each interrupt costs the app (2x: -2.7 %).
            # Not a whole multiple of the rate: the reads drift across the ticks (and across a 1 ms
            # timer in the app, such as stackprof's) instead of keeping one phase to them. At most
            # MAX_RATE_HZ (the interrupts' cost)
            prog = self._bpf.load_func(b"on_cpu_clock", BPF.PERF_EVENT)
            self.timers = ThreadTimers(prog.fd, read_period_ns(self.rate_hz), MAX_TIMERS)
        except Exception as e:  # bcc raises a bare Exception for a failed compile, load or attach
            self.close()
            raise EbpfUnavailable(f"the in-context reads did not load: "
                                  f"{str(e).splitlines()[0] if str(e) else e}") from None
        self._map_array("ctx_slots", CTX_SLOTS * ctx_slot_size())   # the sampler's sizeof

    def add(self, pid: int, layout: dict, gc_active_addr: int = 0) -> None:
        """Threads of process `pid` (running the Ruby of `layout`, its row) are read in context from
        now on (those its sampler asks for). The GC word read with each stack: objspace->flags and
        the running ec where the gem found them (3.1), else gc_active_addr, the gem's gc_active word
        in the process (its registry's mapping there; 0: none, the tick's read decides)."""
        targets = self._bpf["ctx_targets"]
        leaf = targets.Leaf()
        for name in ("thread_ec", "ec_vm_stack", "ec_vm_stack_size", "ec_cfp", "cfp_sp"):
            value = int(layout[name])
            if name != "thread_ec" and (value % 8 or not 0 <= value < 64):
                raise EbpfUnavailable(f"the layout's {name} ({value}) is not a word below 64 bytes")
            setattr(leaf, name, value)
        if layout.get("gc_flags_addr") and layout.get("running_ec_addr"):
            leaf.gc_addr, leaf.running_ec_addr = int(layout["gc_flags_addr"]), int(layout["running_ec_addr"])
        else:
            leaf.gc_addr, leaf.running_ec_addr = gc_active_addr, 0
        targets[targets.Key(pid)] = leaf
        self.pids.add(pid)
        if self.timers is not None:
            self.timers.admit(pid)

    def follow(self, pid: int, tids) -> None:
        """`tids`: the live threads of process pid (added) now, as its registry lists them: a timer
        on each (up to MAX_TIMERS over all processes), none any more on its threads not among them."""
        if self.timers is not None:
            self.timers.follow(pid, tids)

    def untimed(self, pid: int) -> int:
        """Threads of pid read from outside only, for want of a timer (MAX_TIMERS, or refused)."""
        return self.timers.counts(pid)["untimed"] if self.timers is not None else 0

    def remove(self, pid: int) -> None:
        if self.timers is not None:
            self.timers.forget(pid)
        super().remove(pid)

    def close(self) -> None:
        if self.timers is not None:
            self.timers.close()
        super().close()


def mapped_at(pid: int, ino: int, offset: int) -> int:
    """The address of byte `offset` of the file of inode `ino` in process pid's memory (its mapping
    from the file's start), 0 when it is not mapped there."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6 and parts[4] == str(ino) and int(parts[2], 16) == 0:
                    lo, hi = (int(x, 16) for x in parts[0].split("-"))
                    if lo + offset + 4 <= hi:
                        return lo + offset
    except (OSError, ValueError):
        pass
    return 0


_prep_lock = threading.Lock()
_prep: Optional[dict] = None        # the compile prepare() started: its thread, rate and outcome


def prepare(rate_hz: float) -> None:
    """Start compiling the in-context reads now, in a thread of their own (at low priority, one
    compile at a time), before any target is known: `record` calls this before it starts the
    program, so that the reads are in when the program's registry appears. take() gets them."""
    global _prep
    with _prep_lock:
        if _prep is not None:
            return
        st: dict = {"rate": rate_hz, "ic": None, "error": None}

        def run() -> None:
            ic = InContext(rate_hz)
            try:
                ic.start()
                st["ic"] = ic
            except EbpfUnavailable as e:
                st["error"] = e
            except Exception as e:      # the recording goes on without them, whatever happened here
                st["error"] = EbpfUnavailable(f"{e.__class__.__name__}: {e}")

        st["thread"] = threading.Thread(target=run, name="sdb-ebpf-in-context", daemon=True)
        bpfload.COMPILE_THREADS.append(st["thread"])
        _prep = st
        st["thread"].start()


def take(rate_hz: float) -> InContext:
    """The in-context reads prepare() compiled (waiting for its compile to end), or compiled now.
    Raises EbpfUnavailable when they cannot be had."""
    global _prep
    with _prep_lock:
        st, _prep = _prep, None
    if st is not None:
        st["thread"].join()
        if st["ic"] is not None and st["rate"] == rate_hz:
            return st["ic"]
        if st["ic"] is not None:
            st["ic"].close()
        elif st["error"] is not None:
            raise st["error"]
    ic = InContext(rate_hz)
    ic.start()
    return ic
