"""A name read from the target is taken only when no GC sweep was in progress before or after the
read, and none ran in between. A sample showed the ISeq alive, but it can die before the read; then a
lazy sweep frees its name's Strings on one page (their slots soon hold the program's new Strings)
while the ISeq itself, on a page not swept yet, still reads whole, with its own instructions, twice
alike: the read would give one of those Strings as its path (issue 44: `block in <main> (1299:1)`
under GC.compact). Here the memory is arranged that way between the sample and the read: the read of
`victim` is held (the Drainer's read, patched in this process) while the program leaves `victim` and
the test, through /proc/PID/mem, points `victim`'s path (rb_iseq_location_t.pathobj) at the
program's String "1299" and marks a sweep started since the sample and in progress where the sidecar
looks for one (the gem's count of sweep starts and ends made odd with one start more, 3.3+; objspace's GC count bumped and its flags' mode
set to sweeping, 3.1; put back afterwards). The
program is parked: it allocates nothing, so its GC does not run meanwhile. The sidecar only reads."""
from __future__ import annotations

import os
import struct

from conftest import read_trace


def test_a_path_read_while_a_sweep_is_in_progress_names_nothing(ruby_target, monkeypatch, tmp_path):
    # GIVEN a program waiting in `victim` (an eval'd method), and the address of a String "1299" of its own
    from sdb_sidecar.recording import recorder
    from sdb_sidecar.recording.drainer import Drainer
    from sdb_sidecar.recording.options import Options
    from sdb_sidecar.target.target import open_target
    target = ruby_target("swept_name.rb")
    junk = int(target.ready_line.split()[1])
    real_read = Drainer.read_iseq
    arranged = []
    restore = []

    def read_iseq(self, addr, encoded, *lo):
        info, replaced, read_ns = real_read(self, addr, encoded, *lo)
        if info is None or info["label"] != "victim" or arranged:
            return info, replaced, read_ns
        # the state a lazy sweep leaves between the sample and the read: `victim` left every stack,
        # its path's slot holds another String, and the sweep is still in progress
        target.send("\n")
        target.wait_for_line("left")
        L = self.remote.L
        body = self.remote.iseq_body(addr)
        with open(f"/proc/{target.pid}/mem", "r+b", buffering=0) as mem:
            mem.seek(body + L["body_pathobj"])
            mem.write(struct.pack("<Q", junk))
            if L["gc_sweeps_addr"]:
                # a sweep started since the sample, in progress: the count of starts and ends made odd
                # and one start more. The program may be parked in a lazy sweep already (odd: Ruby
                # 4.0's boot leaves one unfinished, and nothing allocates to finish it); then that
                # one ends and the next starts (+2), as +1 would only end it, which frees nothing
                # the sample saw alive
                words = [(L["gc_sweeps_addr"], 8, lambda w: w + 2 if w & 1 else w + 1)]
            else:
                assert L["gc_count_addr"] and L["gc_flags_addr"], "the gem found no GC word on this Ruby"
                words = [(L["gc_count_addr"], 8, lambda w: w + 1),      # a GC started ...
                         (L["gc_flags_addr"], 4, lambda w: (w & ~L["gc_mode_mask"]) | L["gc_mode_sweeping"])]
            for where, size, change in words:
                mem.seek(where)
                was = mem.read(size)
                mem.seek(where)
                mem.write(change(int.from_bytes(was, "little")).to_bytes(size, "little"))
                restore.append((where, was))
        again = real_read(self, addr, encoded, *lo)
        arranged.append((addr, again[0]))
        return again
    monkeypatch.setattr(Drainer, "read_iseq", read_iseq)
    # WHEN it is recorded for 2 s without eBPF (every name read from the target)
    out = tmp_path / "t.msgpack"
    try:
        recorder.record(open_target(target.pid, wait_s=5), str(out), Options(duration_s=2, quiet=True, ebpf=False),
                        status_stream=open(os.devnull, "w"))
    finally:
        with open(f"/proc/{target.pid}/mem", "r+b", buffering=0) as mem:
            for where, was in restore:
                mem.seek(where)
                mem.write(was)
    # THEN the read was made on the arranged memory ...
    assert arranged, "no read of victim's ISeq was made"
    t = read_trace(out)
    assert t.end is not None and t.end["reason"] == "duration", t.end
    # ... and no ISeq is named with the String as its path: victim's frame is (unknown), counted
    assert [r for r in t.records if r["t"] == "iseq" and r.get("path") == "1299"] == []
    records = [r for r in t.records if r["t"] == "iseq" and r["addr"] == arranged[0][0]]
    assert records and all(r["label"] == "(unknown)" for r in records), records
    assert t.end["unnamed"]["iseqs"] >= 1 and t.end["names_read_in_sweep"] >= 1, t.end
