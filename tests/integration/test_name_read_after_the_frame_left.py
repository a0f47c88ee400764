"""A name read from the target after the sample that showed its ISeq is written only once a sample
copied after the read shows the ISeq alive again. An ISeq that left every stack between the sample and
the read can be dead and not yet swept, its location's Strings swept first and their slots taken by
the program's new Strings: the read then gives one of those as its path, twice alike, with the ISeq's
own instructions (issue 44: `block in <main> (1299:1)` under GC.compact). Here the memory is arranged
that way between the sample and the read, deterministically: the read of `victim` is held (the
Drainer's read, patched in this process) while the program leaves `victim` and the test writes
`victim`'s path (rb_iseq_location_t.pathobj) to point at the program's String "1299" through
/proc/PID/mem. The sidecar only reads."""
from __future__ import annotations

import os
import struct

from conftest import read_trace


def test_a_path_read_after_the_frame_left_every_stack_names_nothing(ruby_target, monkeypatch, tmp_path):
    # GIVEN a program waiting in `victim` (an eval'd method: its path is an eval's name), and the
    # address of a String "1299" of its own
    from sdb_sidecar import recorder
    from sdb_sidecar.drainer import Drainer
    from sdb_sidecar.options import Options
    from sdb_sidecar.target import open_target
    target = ruby_target("left_frame.rb")
    junk = int(target.ready_line.split()[1])
    real_read = Drainer.read_iseq
    arranged = []

    def read_iseq(self, addr, encoded):
        info, replaced, read_ns = real_read(self, addr, encoded)
        if info is None or info["label"] != "victim" or arranged:
            return info, replaced, read_ns
        # the state the race leaves between the sample and the read: `victim` left every stack, and
        # its path's slot holds another String
        target.send("\n")
        target.wait_for_line("left")
        body = self.remote.iseq_body(addr)
        with open(f"/proc/{target.pid}/mem", "r+b", buffering=0) as mem:
            mem.seek(body + self.remote.L["body_pathobj"])
            mem.write(struct.pack("<Q", junk))
        again = real_read(self, addr, encoded)
        arranged.append((addr, again[0]))
        return again
    monkeypatch.setattr(Drainer, "read_iseq", read_iseq)
    # WHEN it is recorded for 2 s without eBPF (every name read from the target)
    out = tmp_path / "t.msgpack"
    recorder.record(open_target(target.pid, wait_s=5), str(out), Options(duration_s=2, quiet=True, ebpf=False),
                    status_stream=open(os.devnull, "w"))
    # THEN the read was made on the arranged memory, and it gave "1299" (the arrangement holds) ...
    assert arranged, "no read of victim's ISeq was made"
    assert arranged[0][1] is not None and arranged[0][1]["path"] == "1299", arranged
    t = read_trace(out)
    assert t.end is not None and t.end["reason"] == "duration", t.end
    # ... but no ISeq is named with that path: victim's frame is (unknown), counted
    records = [r for r in t.records if r["t"] == "iseq" and r["addr"] == arranged[0][0]]
    assert records, "victim's ISeq has no record"
    assert [r["path"] for r in t.records if r["t"] == "iseq" and r["path"] == "1299"] == []
    assert all(r["label"] == "(unknown)" for r in records), records
    assert t.end["names_unconfirmed"] >= 1 and t.end["unnamed"]["iseqs"] >= 1, t.end
    # AND the program's own frames are named: the ones that stayed on its stack were confirmed
    assert any(r["t"] == "iseq" and r["label"] == "parked" for r in t.records)
