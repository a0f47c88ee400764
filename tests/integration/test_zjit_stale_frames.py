"""Under ZJIT, a frame is named by what runs in it, never by what its control frame held before.

ZJIT's lightweight frames (Ruby 4.1+) leave a frame's ISeq and pc in the control frame as an older
frame left them; the real ones are in the frame's JIT frame record (zjit.h: CFP_ZJIT_FRAME), which
the sampler reads (_reads.pyx: zjit_frame), or drops the read, counted, when it cannot. 4.0's ZJIT
writes the ISeq at each push: the same program must give the same names there.
tests/programs/zjit_stale_frames.rb leaves a thread asleep in zs_step > zs_wait > sleep, all
three frames pushed over slots that the interpreter filled last with zs_decoy_outer > zs_decoy >
zs_decoy_leaf."""
from __future__ import annotations

import subprocess
from collections import Counter

import pytest

from sdb_trace import KIND_CFUNC

from conftest import SDB_RUBY, record_until_ready, ruby_env


def zjit_available() -> bool:
    r = subprocess.run([SDB_RUBY, "--zjit", "-e", "exit(defined?(RubyVM::ZJIT) && RubyVM::ZJIT.enabled? ? 0 : 1)"],
                       capture_output=True, env=ruby_env(), timeout=30)
    return r.returncode == 0


def lightweight_frames() -> bool:
    """Ruby 4.1+: ZJIT's frames keep their ISeq and pc in a JIT frame record (ruby c8f97943ef)."""
    r = subprocess.run([SDB_RUBY, "-e", "print RUBY_VERSION"], capture_output=True, text=True, env=ruby_env(), timeout=30)
    return tuple(int(x) for x in r.stdout.split(".")[:2]) >= (4, 1)


pytestmark = [pytest.mark.every_ruby, pytest.mark.skipif(not zjit_available(), reason=f"{SDB_RUBY} has no ZJIT compiled in")]

DECOYS = {"zs_decoy_outer", "zs_decoy", "zs_decoy_leaf"}


def names(trace, sample) -> tuple:
    """The sample's frames, innermost first: a Ruby frame's label, a C method's name, None: unnamed."""
    t = trace.tables
    out = []
    for fid, label in zip(t.stacks[sample[2]], trace.labels_of(sample)):
        if t.frame_kind[fid] == KIND_CFUNC:
            sym = t.symbol_at(t.cfuncs, t.frame_me[fid], sample[0])
            label = sym.label if sym else None
        out.append(label)
    return tuple(out)


def test_a_frame_zjit_pushed_over_another_methods_slot_is_named_by_what_runs_in_it(tmp_path):
    # GIVEN zjit_stale_frames.rb under ZJIT: thread "stale" asleep in zs_step > zs_wait > sleep, whose
    # control frames (4.1) still hold the decoys the interpreter ran last at those depths
    # WHEN it is recorded
    trace = record_until_ready(tmp_path, "zjit", "zjit_stale_frames.rb", ["--zjit"], "-d", "1", "--no-ebpf")
    stale = trace.serial_named("stale")
    stacks = Counter(names(trace, s) for s in trace.samples_of(stale))
    # THEN no sample of the thread names a decoy: a wrong name is worse than none
    assert not [s for s in stacks if DECOYS & set(s)], (stacks, trace.end)
    # AND the thread is sampled as what it runs, its three innermost frames named (innermost first)
    assert stacks and all(s[:3] == ("sleep", "zs_wait", "zs_step") for s in stacks), (stacks, trace.end)
    if lightweight_frames():
        # AND on 4.1 its names came from the JIT frame records (the control frames hold the decoys'),
        # and every record read could be read
        assert trace.end["zjit_frames"] > 0 and trace.end["zjit_unread"] == 0, trace.end
