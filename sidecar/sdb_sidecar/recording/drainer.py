"""Turns what the sampler gathered into trace records, and names what its samples show first (ISeqs,
method entries) by eBPF's births or by reading the target."""
from __future__ import annotations

import time
from typing import Optional

from sdb_trace import TraceWriter
from sdb_trace.registry_h import SDB_TRACE_ID_AT, SDB_TRACE_ID_LEN, SDB_TRACE_SPAN_AT, SDB_TRACE_SPAN_LEN

from ..sampler import _sampler
from ..ebpf.view import EbpfView
from ..target.symbols import RemoteReadError, RemoteRuby, shown_as_c_method
from ..target.target import Target

# A name a read could not give (an ISeq or method entry moved, replaced or half written as it was read)
# is read again when a sample shows it again: at once, then after waits that double, at most RETRIES
# times (an address that never names is not read for ever)
RETRIES = 10
RETRY_WAIT_S = 0.1          # the wait before the second retry; the first is at the next sight
RETRY_WAIT_MAX_S = 5.0
GIVEN_UP = -1
# A read of an ISeq that failed on what passes (its name's strings moved by GC compaction while they
# were read, memory half written) is tried again at the next drains, for at most this long, before
# the ISeq is written (unknown): until then its samples wait for their name, none goes unnamed for a
# compaction. Not an ISeq replaced at the address: that read names nothing, at once.
READ_AGAIN_NS = 500_000_000

# A read set aside for a GC sweep (Drainer.read_iseq) is tried again after SWEEP_WAIT_S, within at
# most SWEEP_WAIT_BUDGET_S of waits a drain, before it waits for the next drain
SWEEP_WAIT_S = 0.002
SWEEP_WAIT_BUDGET_S = 0.02

# the name of a sampled ISeq that was gone before it could be read (without eBPF to name it at birth)
UNKNOWN_ISEQ = {"label": "(unknown)", "base_label": "(unknown)", "path": "", "realpath": None, "first_line": 0,
                "type": -1}


class Drainer:
    """Turns what the sampler gathered into trace records, and names the ISeqs it saw first.

    A name must hold for every sample that uses it. The sampler hands over each ISeq address it
    saw first with `lo`, the earliest moment that sample's frames may have been copied, and the
    instructions' address it saw there. With eBPF attached, every ISeq born has a record by the
    time the Drainer looks (`EbpfView.sync`): one born at the address at or before `lo`,
    with those instructions, names it, no read needed; otherwise it is read from the target now,
    and that name holds back to `lo` only if no ISeq was born at the address in between (eBPF
    attached all that time says so); if one was, the read named its successor and the sample's
    ISeq is `(unknown)`. Without eBPF (or across one of its pauses) births are not seen: a read
    that finds other instructions at the address names nothing; one that finds the same is taken
    (`unproven` counts those), across a pause only if no GC sweep started since the sample. A read that fails on what passes (a compaction moving the name's
    strings) is read again at the next drains, with the same window, before the ISeq is written
    (unknown) (`read_again`, READ_AGAIN_NS)."""

    BIRTHS_KEPT = 4     # per address: enough for the births since any pending read's `lo`
    SWEEP_COUNTS_KEPT = 16  # the sweep counts of the last drains: enough for any pending read's `lo`

    def __init__(self, target: Target, sampler: "_sampler.Sampler", writer: TraceWriter,
                 ebpf: Optional[EbpfView] = None, from_start: bool = False):
        self.target = target
        self.sampler = sampler
        self.writer = writer
        self.remote = RemoteRuby(sampler, target.registry.layout)
        self.symbol_errors = 0      # names that could not be read (the ISeq or method entry was gone)
        self.superseded = 0         # remote reads that found a successor born since the sample
        self.unproven = 0           # remote names taken without eBPF's proof that nothing was born between
        self.sweep_reads = 0        # ISeq reads set aside (read again) for a GC sweep before or during them,
                                    # or refused for one started since the sample across an eBPF pause
        self.sweep_refused: set = set()  # ISeqs whose last read was refused for a GC sweep (their
                                    # `(unknown)` record says so: `refused: "sweep"`)
        self.sweep_counts: list = []    # [(ns, GC sweeps started by then)], at the end of the last drains
        self.sweep_wait_left = SWEEP_WAIT_BUDGET_S  # this drain's waits for sweeps left (read_iseq)
        self.unnamed_iseqs = 0      # ISeqs written as (unknown): gone, replaced, or superseded before the read
        self.unnamed_methods = 0    # method entries written without a name
        self.renamed_iseqs = 0      # ISeqs written as (unknown) whose read, when sampled again, named them
        self.renamed_methods = 0    # method entries likewise
        self.retries: dict = {}     # ("iseq" | "me", addr) -> (reads that named nothing, when the sampler
                                    # forgets it (monotonic ns), 0 once forgotten, GIVEN_UP)
        self.ebpf = ebpf            # set once the eBPF symbolizer is attached (ebpf.hub.EbpfHub)
        self.names: dict = {}       # addr -> (the name last written for it, its at_ns, its source): a GC
                                    # move carries it; a new file takes it while eBPF says it holds
        self.live: dict = {}        # thread serial -> its last thread record's fields (a new file lists them)
        self.in_file: set = set()   # ISeq addresses with a record in the trace file being written
        self.cut: Optional[dict] = None     # the sampler's counters at the last drain(reset=True)
        self.births: dict = {}      # addr -> [(at_ns, name or None, instructions)], eBPF births, oldest first
        self.to_read: list = []     # [(addr, lo_ns, instructions)]: ISeqs to name by reading the target
        self.read_again: list = []  # [(addr, lo_ns, instructions, first read's ns)]: reads that
                                    # failed on what passes, tried again at the next drain (READ_AGAIN_NS)
        self.ebpf_announced = False     # the trace's ebpf_attached record is written
        self.kernel_view_ns = 0         # when the sampler began to use the kernel view (ebpf.hub.EbpfHub)
        self.kernel_view_announced = False
        self.spans = SpanReader(target.registry, writer,
                                target.info["created_mono_ns"] if from_start else None)
        self.note_sweeps()      # before the first samples: an app idle mid-sweep is named at once

    def write_iseq(self, addr: int, at_ns: int, source: str, info: dict, **extra) -> None:
        self.remote.forget(addr)    # a new ISeq here: cached facts about the address are stale
        self.names[addr] = (info, at_ns, source)
        self.in_file.add(addr)
        if info is UNKNOWN_ISEQ:
            self._unnamed("iseq", addr)
        elif self.retries.pop(("iseq", addr), None) is not None and source == "remote":
            self.renamed_iseqs += 1
        self.writer.iseq(addr, at_ns=at_ns, source=source, **info, **extra)

    def _unnamed(self, kind: str, addr: int) -> None:
        failed = self.retries.get((kind, addr), (0, 0))[0] + 1
        if failed > RETRIES:
            due = GIVEN_UP
        else:
            wait = 0.0 if failed == 1 else min(RETRY_WAIT_S * 2 ** (failed - 2), RETRY_WAIT_MAX_S)
            due = _sampler.monotonic_ns() + int(wait * 1e9)
        self.retries[(kind, addr)] = (failed, due)

    def forget_unnamed(self) -> None:
        """The sampler forgets the unnamed ISeqs and method entries due for another read: the next
        sample that shows one hands it over again (Sampler.forget_names)."""
        now = _sampler.monotonic_ns()
        due = [key for key, (_, at) in self.retries.items() if 0 < at <= now]
        if not due:
            return
        for key in due:
            self.retries[key] = (self.retries[key][0], 0)
        self.sampler.forget_names([a for k, a in due if k == "iseq"], [a for k, a in due if k == "me"])

    def name_holds(self, addr: int, at_ns: int) -> bool:
        """The name last written for addr still holds at at_ns: written while the eBPF creation
        probes were attached, and they stayed attached until at_ns (no ISeq was born there unseen)."""
        prev = self.names.get(addr)
        return prev is not None and self.ebpf is not None and self.ebpf.attached_throughout(prev[1], at_ns)

    def _born(self, addr: int, at_ns: int, info: Optional[dict], encoded: int) -> None:
        b = self.births.setdefault(addr, [])
        b.append((at_ns, info, encoded))
        if len(b) > 1 and b[-2][0] > at_ns:
            b.sort(key=lambda x: x[0])
        del b[:-self.BIRTHS_KEPT]

    def named_at_birth(self, addr: int, lo: int, encoded: int) -> bool:
        """eBPF named the ISeq at addr that a sample showed (copied at lo or later) at its birth: the
        last birth there at or before lo has a name, these instructions, and no birth came unseen
        from it to lo."""
        ebpf = self.ebpf
        if ebpf is None:
            return False
        births = self.births.get(addr)
        if not births:
            return False
        last = None
        for b in births:
            if b[0] <= lo:
                last = b
        return (last is not None and last[1] is not None and (not encoded or not last[2] or last[2] == encoded)
                and ebpf.attached_throughout(last[0], lo))

    def born_between(self, addr: int, lo: int, hi: int) -> bool:
        return any(lo < b[0] <= hi for b in self.births.get(addr, ()))

    def sync_ebpf(self) -> None:
        """Every eBPF record written until now, into the trace."""
        if self.ebpf is not None:
            self.ebpf.sync()
            self.drain_ebpf()

    def sweeps_at(self, at_ns: int) -> Optional[int]:
        """The target's count of GC sweeps started (RemoteRuby.gc_sweeps_started) as read last at
        or before at_ns (at the end of a drain), or None."""
        best = None
        for t, n in self.sweep_counts:
            if t > at_ns:
                break
            best = n
        return best

    def note_sweeps(self) -> None:
        n = self.remote.gc_sweeps_started()
        if n is not None:
            self.sweep_counts.append((_sampler.monotonic_ns(), n))
            del self.sweep_counts[:-self.SWEEP_COUNTS_KEPT]

    def read_iseq(self, addr: int, encoded: int, lo: int = 0) -> tuple:
        """The name of the ISeq at addr, read from the target: (its info or None, whether another ISeq
        than the sample's is there (other instructions), when it was read). A sample showed it alive,
        but it may have died since: then only a sweep frees its name's Strings, and a lazy sweep can
        have freed them (their slots refilled by the program's new Strings) while the ISeq, on a page
        not swept yet, reads whole, with its own instructions, twice alike. So a read is taken only
        when no sweep was in progress before or after it and none ran in between (RemoteRuby.gc_calm:
        a dead ISeq is freed by the sweep that frees its Strings), or when no sweep started since a
        moment before lo (sweep_counts: what was alive then is whole); else it is tried again
        shortly (SWEEP_WAIT_S, within the drain's budget), then it failed on what passes, and is
        read again at the next drains."""
        since = self.sweeps_at(lo)
        while True:
            self.remote.forget(addr)
            calm = self.remote.gc_calm()
            try:
                if encoded and self.remote.u64(self.remote.iseq_body(addr) + self.remote.L["body_iseq_encoded"],
                                               "ISeq instructions") != encoded:
                    self.sweep_refused.discard(addr)
                    return None, True, _sampler.monotonic_ns()
                info = self.remote.iseq_info(addr)
            except RemoteReadError:
                # nothing read (the target exited, the page is gone): an earlier read refused for a
                # sweep stays the last word on this ISeq
                return None, False, _sampler.monotonic_ns()
            if (calm is not None and self.remote.gc_calm(calm)) or \
                    (since is not None and self.remote.gc_sweeps_started() == since):
                self.sweep_refused.discard(addr)
                return info, False, _sampler.monotonic_ns()
            if self.sweep_wait_left <= 0:
                self.sweep_reads += 1
                self.sweep_refused.add(addr)
                return None, False, _sampler.monotonic_ns()
            # a lazy sweep ends within milliseconds while the app allocates: try again shortly
            # rather than at the next drain, a tenth of a second or more from now
            self.sweep_wait_left -= SWEEP_WAIT_S
            time.sleep(SWEEP_WAIT_S)

    def name_remotely(self, final: bool = False) -> None:
        """Name the ISeqs in to_read by reading them (see the class's docstring); a read that failed on
        what passes is tried again at the next drains (read_again), or at once for the last time
        (final: the recording or its file ends, or a snapshot names what it has now)."""
        now = _sampler.monotonic_ns()
        self.sweep_wait_left = SWEEP_WAIT_BUDGET_S
        reads = self.read_again + [(addr, lo, encoded, now) for addr, lo, encoded in self.to_read]
        self.to_read, self.read_again = [], []
        done = []
        read: dict = {}     # (addr, instructions) -> (info or None, replaced, read_ns): one read each
        first_lo: dict = {}     # (addr, instructions) -> the earliest lo it is read for
        for addr, lo, encoded, _ in reads:
            first_lo[(addr, encoded)] = min(lo, first_lo.get((addr, encoded), lo))
        for addr, lo, encoded, first_read in reads:
            if self.named_at_birth(addr, lo, encoded):
                continue
            if addr not in self.in_file and self.name_holds(addr, lo):
                # named in the recording's previous file (rotation), eBPF attached ever since: the
                # name holds, no read needed; written again so that this file stands alone
                info, at_ns, _ = self.names[addr]
                self.in_file.add(addr)
                self.writer.iseq(addr, at_ns=at_ns, source="restated", **info)
                continue
            if (addr, encoded) not in read:
                read[(addr, encoded)] = self.read_iseq(addr, encoded, first_lo[(addr, encoded)])
            info, replaced, read_ns = read[(addr, encoded)]
            if info is None:
                if not (final or replaced) and now - first_read < READ_AGAIN_NS:
                    self.read_again.append((addr, lo, encoded, first_read))
                    continue
                self.symbol_errors += 1
            done.append((addr, lo, info, read_ns))
        if not done:
            return
        # at or after every read above; only a read across an eBPF pause asks for it (below)
        sweeps_now = self.remote.gc_sweeps_started() if self.ebpf is not None else None
        self.sync_ebpf()        # births until after the reads
        for addr, lo, info, read_ns in done:
            if info is not None:
                if self.ebpf is not None and self.ebpf.attached_throughout(lo, read_ns):
                    if self.born_between(addr, lo, read_ns):
                        self.superseded += 1
                        info = None
                elif self.ebpf is not None and self.ebpf.attached_ns <= lo and \
                        (sweeps_now is None or self.sweeps_at(lo) != sweeps_now):
                    # the probes watched the sample but paused before the read: the ISeq the governor
                    # let be born unseen at this address meanwhile (its instructions' buffer may be the
                    # old one's, freed and reused) passes every check of the read; only a sweep frees
                    # the sample's ISeq for it, so the read is taken only if none started since
                    self.sweep_reads += 1
                    self.sweep_refused.add(addr)
                    info = None
                else:
                    self.unproven += 1
            if info is None:
                self.unnamed_iseqs += 1
                why = {"refused": "sweep"} if addr in self.sweep_refused else {}
                self.write_iseq(addr, lo, "remote", UNKNOWN_ISEQ, **why)
            else:
                self.write_iseq(addr, lo, "remote", info)

    def drain_ebpf(self) -> None:
        """ISeqs named at birth by eBPF (source "ebpf", the event's time); moves keep a name."""
        for ev in self.ebpf.take():
            kind, addr = ev["kind"], ev.get("addr")
            if kind == "new":
                info = {k: ev[k] for k in ("label", "base_label", "path", "realpath", "first_line", "type")}
                if shown_as_c_method(self.remote.L, info["path"]):
                    info["c_trace"] = True
                self._born(addr, ev["at_ns"], info, ev["encoded"])
                self.write_iseq(addr, ev["at_ns"], "ebpf", info)
            elif kind == "remote":      # a string longer than the probe copies: read it here
                self._born(addr, ev["at_ns"], None, ev["encoded"])
                self.to_read.append((addr, ev["at_ns"], ev["encoded"]))
            elif kind == "move":
                self._born(addr, ev["at_ns"], None, 0)
                if self.name_holds(ev["from"], ev["at_ns"]):
                    self.write_iseq(addr, ev["at_ns"], "move", self.names[ev["from"]][0], moved_from=ev["from"])
                elif addr in self.names:
                    # an ISeq whose name is unknown here (or uncertain: a pause came between) took
                    # the place of a named one: read remotely when sampled
                    self.write_iseq(addr, ev["at_ns"], "move", UNKNOWN_ISEQ, moved_from=ev["from"])
            elif kind == "pause":
                self.writer.ebpf_pause(ev["at_ns"], rate=ev["rate"], backoff_s=ev["backoff_s"])
            elif kind == "resume":
                self.writer.ebpf_resume(ev["at_ns"])

    def drain(self, reset: bool = False, final: bool = False) -> dict:
        """What the sampler gathered, into records. reset: the sampler starts over at once (frame and
        stack ids from 0, every ISeq and method entry new again): the records after it go to a new
        trace file (rotation; `restate` writes what that file needs first). reset or final: every
        ISeq it showed is named now or written (unknown), none left to read again."""
        d = self.sampler.drain(encode_samples=True, reset=reset)
        self.note_sweeps()      # for the samples the next drains hand over (read_iseq)
        self.cut = d.get("cut")         # reset: the sampler's counters at the cut
        w = self.writer
        if self.ebpf is not None and not self.ebpf_announced and self.ebpf.attached_ns < 1 << 63:
            self.ebpf_announced = True
            w.ebpf_attached(self.ebpf.attached_ns, self.ebpf.attach_kind)
        if self.kernel_view_ns and not self.kernel_view_announced:
            self.kernel_view_announced = True
            w.kernel_view(self.kernel_view_ns)
        self.sync_ebpf()        # every ISeq the samples above show was born before this
        if self.ebpf is not None and self.ebpf.paused:
            # the sampler names every ISeq anew when the probes stop and come back (on_pause), and
            # while they are out at every drain: an ISeq born unseen at an address it knows, on the
            # same instructions' memory, passes for the one before it until then
            self.sampler.forget_iseqs()
        for ev in d["threads"]:
            if not ev["ended"]:
                self.live[ev["serial"]] = (ev["tid"], ev["name"], ev["start_ns"], ev["flags"], ev["at_ns"])
                w.thread(ev["serial"], ev["tid"], ev["name"], ev["start_ns"], ev["flags"], ev["at_ns"])
        for (addr, lo), encoded in zip(d["new_iseqs"], d["new_iseq_encoded"]):
            self.to_read.append((addr, lo, encoded))
        self.name_remotely(final=reset or final)
        for me, at_ns, definition, klass in d["new_mes"]:
            try:
                m = self.remote.method_info(me, expect=(definition, klass) if definition else None)
            except RemoteReadError:
                self.symbol_errors += 1
                m = {"name": None, "type": -1, "class_path": None, "singleton": False}
            if m["name"] is None:
                self.unnamed_methods += 1
                self._unnamed("me", me)
            elif self.retries.pop(("me", me), None) is not None:
                self.renamed_methods += 1
            w.method(me, at_ns=at_ns, source="remote", **m)
        if d["frame_kind"]:
            # a Ruby frame of pc 0 is one YJIT pushed whose pc the sampler could not trust: no line
            lines = [self.remote.line(i, pc) if k == 0 and pc != 0 else 0
                     for k, i, pc in zip(d["frame_kind"], d["frame_iseq"], d["frame_pc"])]
            w.frames(d["first_frame"], d["frame_kind"], d["frame_iseq"], d["frame_pc"], d["frame_me"], lines)
        if d["stacks"]:
            w.stacks(d["first_stack"], d["stacks"])
        if d["samples_record"] is not None:
            w.encoded(d["samples_record"])
        for ev in d["threads"]:
            if ev["ended"]:
                self.live.pop(ev["serial"], None)
                w.thread_end(ev["serial"], ev["at_ns"])
        self.spans.drain()
        w.flush()
        self.forget_unnamed()
        return d


    def restate(self) -> None:
        """The first records of a new trace file (rotation), after `drain(reset=True)` went to the old
        one: the threads alive, eBPF's attach and a pause under way, the units of work still open.
        Names come as the samples show them again (the sampler started over)."""
        w = self.writer
        self.in_file = set()
        for serial, (tid, name, start_ns, flags, at_ns) in self.live.items():
            w.thread(serial, tid, name, start_ns, flags, at_ns)
        if self.ebpf_announced:
            w.ebpf_attached(self.ebpf.attached_ns, self.ebpf.attach_kind)
            pauses = self.ebpf.pauses
            if pauses and pauses[-1][1] is None:
                w.ebpf_pause(pauses[-1][0], rate=0, backoff_s=0.0)
        if self.kernel_view_announced:
            w.kernel_view(self.kernel_view_ns)
        self.spans.restate()
        w.flush()


class SpanReader:
    """The units of work (requests, jobs, labels) the gem writes into its registry's span ring, into
    the trace's `spans` records (docs/trace-format.md). The ring still holds events from before the
    recording: a span that ended before it started is left out; one that began before it and is
    still open is written with its begin (held back until its end comes, or the recording ends).
    since_ns: where the recording starts for spans (`record`: the registry's creation, the app's
    first moment with sdb), else the trace's start."""

    def __init__(self, registry, writer: TraceWriter, since_ns: Optional[int] = None):
        self.reg = registry
        self.writer = writer
        self.start_ns = since_ns or getattr(writer, "start_mono_ns", None) or _sampler.monotonic_ns()
        head = registry.span_head()
        self.next = max(0, head - registry.span_count)     # what the ring can still hold
        self.lost = 0                           # events overwritten before they were read
        self.names: dict = {}                   # string id -> str (the table is append-only)
        self.early: dict = {}                   # span -> its begin event, begun before the recording
        self.open: dict = {}                    # span -> its begin event, written and not ended yet

    def name(self, sid: int) -> Optional[str]:
        if sid == 0:
            return None
        n = self.names.get(sid)
        if n is None:
            b = self.reg.string_at(sid)
            if b is None:
                return None                     # never a guess: the span keeps no endpoint
            n = self.names[sid] = b.decode("utf-8", "replace")
        return n

    def drain(self, final: bool = False) -> None:
        events, self.next, lost = self.reg.read_spans(self.next)
        self.lost = min(self.lost + lost, (1 << 63) - 1)     # a garbled ring's head can claim any number
        out = []
        for ev in events:
            what, span, at_ns = ev[0], ev[1], ev[4]
            if what == 1 and at_ns < self.start_ns:
                self.early[span] = ev
                continue
            if what == 1:
                self.open[span] = ev
            if what == 2:
                self.open.pop(span, None)
                begun = self.early.pop(span, None)
                if at_ns < self.start_ns:
                    continue                    # over before the recording began
                if begun is not None:
                    out.append(begun)
            out.append(ev)
        if final:
            out[:0] = self.early.values()       # still open at the end: their begins
            self.early.clear()
        self.write(out)

    def restate(self) -> None:
        """A new trace file (rotation): the begins of the units of work still open."""
        self.write(list(self.open.values()))

    def write(self, out: list) -> None:
        if not out:
            return
        cols = list(zip(*out))
        trace_ids, span_ids = zip(*(trace_context(ids) for ids in cols[9]))
        self.writer.spans(list(cols[0]), list(cols[1]), list(cols[2]), list(cols[3]), list(cols[4]),
                          list(cols[5]), [self.name(i) for i in cols[6]], list(cols[7]),
                          [r.decode("utf-8", "replace") if r else None for r in cols[8]],
                          list(trace_ids), list(span_ids))


def trace_context(ids: Optional[bytes]) -> tuple:
    """A begin event's trace context (docs/registry-format.md, "Spans") as (trace id, span id) in
    lowercase hex, each None when absent (all zero: W3C Trace Context's invalid id)."""
    if not ids:
        return None, None
    trace = ids[SDB_TRACE_ID_AT:SDB_TRACE_ID_AT + SDB_TRACE_ID_LEN]
    span = ids[SDB_TRACE_SPAN_AT:SDB_TRACE_SPAN_AT + SDB_TRACE_SPAN_LEN]
    return (trace.hex() if any(trace) else None), (span.hex() if any(span) else None)
