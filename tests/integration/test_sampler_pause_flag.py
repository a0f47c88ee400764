"""eBPF's pause flag, watched by the sampler itself: a pause of the creation probes voids every name
eBPF gave before it, so the sampler names every ISeq anew from the first tick that sees the flag
change, not when the sidecar's Python threads get to it (200 ms beside a CPU hog: a soak test
showed 12,960 samples with an (unknown ISeq) in the 210 ms after a pause's start). Here the flag is
a word of ours, set by hand; test_ebpf_governor checks the real one (the program's mapped array)."""
from __future__ import annotations

import ctypes

from conftest import wait_for
from sdb_sidecar.sampler import _sampler
from sdb_sidecar.recording.options import Options
from sdb_sidecar.recording.session import new_sampler
from sdb_sidecar.target.target import open_target
from sdb_trace import KIND_RUBY


class Drains:
    """The sampler's drains, with the frames and stacks they defined kept across them."""

    def __init__(self, sampler):
        self.sampler = sampler
        self.frames: dict = {}      # frame id -> (kind, iseq)
        self.stacks: dict = {}      # stack id -> [frame ids]

    def drain(self) -> dict:
        d = self.sampler.drain(encode_samples=False)
        for i, (kind, iseq) in enumerate(zip(d["frame_kind"], d["frame_iseq"])):
            self.frames[d["first_frame"] + i] = (kind, iseq)
        for i, frames in enumerate(d["stacks"]):
            self.stacks[d["first_stack"] + i] = frames
        return d

    def iseqs_shown(self, d: dict, since_ns: int = 0) -> set:
        """The ISeqs on the stacks of the samples of drain d taken at since_ns or later."""
        out = set()
        for t, sid in zip(d["sample_t"], d["sample_stack"]):
            if t >= since_ns:
                out.update(iseq for kind, iseq in (self.frames[f] for f in self.stacks[sid]) if kind == KIND_RUBY)
        return out


def ticks_past(sampler, n: int) -> None:
    at = sampler.stats()["ticks"]
    wait_for(lambda: sampler.stats()["ticks"] >= at + n, 60, what=f"{n} more ticks")


def test_the_sampler_names_every_iseq_anew_at_the_first_tick_that_sees_the_pause_flag_change(ruby_target):
    # GIVEN a sampler of a Ruby whose threads run the same methods, watching a pause flag (0: attached)
    target = ruby_target("eight_threads.rb")
    sampler = new_sampler(open_target(target.pid, wait_s=5), Options())
    flag = ctypes.c_uint64(0)
    sampler.watch_ebpf_pause(ctypes.addressof(flag))
    drains = Drains(sampler)
    sampler.start(0.0, False)
    try:
        ticks_past(sampler, 20)
        first = drains.drain()
        known = {addr for addr, _ in first["new_iseqs"]}
        assert known
        # WHEN the flag stays as it is, THEN no ISeq it handed over is handed over again
        ticks_past(sampler, 20)
        again = drains.drain()
        assert not known & {addr for addr, _ in again["new_iseqs"]}
        assert drains.iseqs_shown(again) & known
        # WHEN the probes stop (the flag is set to the pause's start), and later come back (0)
        for value in (_sampler.monotonic_ns(), 0):
            set_at = _sampler.monotonic_ns()
            flag.value = value
            ticks_past(sampler, 20)
            d = drains.drain()
            handed = dict(d["new_iseqs"])
            shown = drains.iseqs_shown(d, since_ns=set_at)
            # THEN every ISeq a sample shows from then on is handed over anew (named again), no older
            # than the change, the ones named before included; and the sampler counts what it saw
            assert shown & known
            assert shown <= set(handed), sorted(shown - set(handed))
            assert all(handed[a] >= set_at for a in shown), [(a, handed[a], set_at) for a in shown]
        assert sampler.stats()["pauses_seen"] == 2
    finally:
        sampler.stop()
        sampler.wait()
