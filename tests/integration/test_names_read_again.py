"""A name a read could not give is read again: an ISeq or method entry whose read failed at its first
sight (GC moved or replaced what was being read, the strings were half written) is written unnamed
for the samples until then, and read again when a sample shows it again. Before, it stayed unnamed
for the rest of the recording: once, a frame on nearly every stack of the soak (70 % of its samples
with an unnamed frame, 3.1, around an eBPF pause)."""
from __future__ import annotations

import os

from conftest import read_trace
from sdb_symbolize.labels import LABELS_RUBY
from sdb_symbolize.resolve import Resolver
from sdb_trace import iter_samples

# what Ruby's own frames of the program's methods are called, and what they are without their method
OWN = {"Object#callee", "Object#caller_of"}
BARE = {"callee", "caller_of"}


def test_an_iseq_or_method_entry_whose_first_read_failed_is_named_when_sampled_again(ruby_target, monkeypatch,
                                                                                     tmp_path):
    # GIVEN a program working in callee under caller_of (and Process.clock_gettime), and the first
    # read of every ISeq and method entry failing
    from sdb_sidecar.recording import recorder
    from sdb_sidecar.recording.options import Options
    from sdb_sidecar.target.symbols import RemoteReadError, RemoteRuby
    from sdb_sidecar.target.target import open_target
    target = ruby_target("callee_share.rb", "2000", "60", "sdb")
    failed = set()
    real_iseq_info, real_method_info = RemoteRuby.iseq_info, RemoteRuby.method_info

    def iseq_info(self, iseq):
        if ("iseq", iseq) not in failed:
            failed.add(("iseq", iseq))
            raise RemoteReadError(f"ISeq 0x{iseq:x}: its first read fails (the test's)")
        return real_iseq_info(self, iseq)

    def method_info(self, me, expect=None):
        if ("me", me) not in failed:
            failed.add(("me", me))
            raise RemoteReadError(f"method entry 0x{me:x}: its first read fails (the test's)")
        return real_method_info(self, me, expect)
    monkeypatch.setattr(RemoteRuby, "iseq_info", iseq_info)
    monkeypatch.setattr(RemoteRuby, "method_info", method_info)
    # (an ISeq read that fails is first read again at the next drains, before anything is written:
    # tests/unit/test_iseq_reads_across_a_compaction.py. Taken out here: this is the later sight's read)
    from sdb_sidecar.recording import drainer
    monkeypatch.setattr(drainer, "READ_AGAIN_NS", 0)
    # WHEN it is recorded for 4 s without eBPF (every name read from the target)
    out = tmp_path / "t.msgpack"
    root = open_target(target.pid, wait_s=5)
    recorder.record(root, str(out), Options(duration_s=4, quiet=True, ebpf=False),
                    status_stream=open(os.devnull, "w"))
    # THEN every ISeq and entry read failed once, was written unnamed, and was named by a later read
    t = read_trace(out)
    assert t.end is not None and t.end["reason"] == "duration", t.end
    assert any(k == "iseq" for k, _ in failed) and any(k == "me" for k, _ in failed), failed
    assert t.end["unnamed"]["iseqs"] >= 2 and t.end["unnamed"]["methods"] >= 2, t.end
    assert t.end["renamed"]["iseqs"] >= 2 and t.end["renamed"]["methods"] >= 2, t.end
    # AND each of them read again was named by that read (only first reads fail here)
    for table, unnamed in ((t.tables.iseqs, lambda s: s.label.startswith("(unknown")),
                           (t.tables.cfuncs, lambda s: s.record.get("name") is None)):
        for addr, syms in table.items():
            assert not any(unnamed(s) for s in syms[1:]), (hex(addr), [(s.at_ns, s.label, s.source) for s in syms])
    # AND in the recording's last second the program's methods are named, with their class, never
    # bare (the samples before the second reads keep the unnamed frames: ~20 ms of them here; a frame
    # first seen late, unnamed at its first sight, may stay so to the end)
    last_second = t.end["at_ns"] - 1_000_000_000
    resolver = Resolver(t.tables, LABELS_RUBY)
    counts = {"samples": 0, "after": 0, "unnamed": 0, "own": 0, "bare": 0}

    def on_batch(base, dts, threads, sids, states):
        for dt, sid in zip(dts, sids):
            counts["samples"] += 1
            if base + dt < last_second:
                continue
            labels = [f.label for f in resolver.stack(sid, base + dt)]
            counts["after"] += 1
            counts["unnamed"] += any(lb.startswith("(unknown") or lb == "(C function)" for lb in labels)
            counts["own"] += any(lb in OWN for lb in labels)
            counts["bare"] += any(lb in BARE for lb in labels)
    iter_samples(str(out), on_batch)
    assert counts["after"] >= 100, counts
    assert counts["bare"] == 0, counts
    assert counts["own"] >= 0.9 * counts["after"], counts
    assert counts["unnamed"] <= 0.1 * counts["after"], counts
