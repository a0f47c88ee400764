"""The counts of a recording's end records: those that add up over the processes of a tree (`summed`),
and the ones a file holds when a recording is rotated into several (`file_counts`)."""
from __future__ import annotations

from typing import List, Optional

# the counts of the end record that add up over the processes (ticks, late, missed: process 0's sampler's)
SUMMED = ("samples", "torn", "retried", "reused", "errors", "yjit_no_line", "span_unsure", "in_context",
          "in_context_untimed", "spans_lost", "endpoints_refused", "threads", "symbol_errors", "names_superseded",
          "names_unproven", "pauses_seen", "names_read_in_sweep", "zjit_frames", "zjit_unread")


def summed(counts: dict, others: List[dict]) -> dict:
    """counts with the SUMMED counts and the unnamed frames of others added (a new dict)."""
    c = dict(counts)
    for k in SUMMED:
        c[k] = c.get(k, 0) + sum(o.get(k, 0) for o in others)
    for name in ("unnamed", "renamed"):
        c[name] = {k: c[name][k] + sum(o[name][k] for o in others) for k in ("iseqs", "methods")}
    return c


def file_counts(by_proc: list, counts: dict, at_ns: Optional[int] = None, reason: Optional[str] = None,
                at_cut: Optional[dict] = None) -> dict:
    """The end record of one file: the counts it holds. Without rotation, `counts` (the whole
    recording's); with it, each process's (by_proc: the tree's ProcessRecordings) counts at the
    file's end (`at_cut`: proc -> counts at its cut; else its final ones) less those when the file
    began (its base)."""
    c = dict(counts)
    c.pop("files", None)
    if at_ns is not None:
        c["at_ns"] = at_ns
    if reason is not None:
        c["reason"] = reason
    if at_cut is None and not any(pr.base is not None for pr in by_proc):
        return c                            # one file: the whole recording is in it
    ends = at_cut if at_cut is not None else {pr.proc: pr.counts for pr in by_proc}
    zero: dict = {}
    for k in SUMMED + ("ticks", "late", "missed"):
        if k == "threads":
            continue
        total = 0
        for pr in by_proc:
            end = ends.get(pr.proc)
            if end is None or (pr.proc != 0 and k in ("ticks", "late", "missed")):
                continue
            total += end.get(k, 0) - (pr.base or zero).get(k, 0)
        c[k] = total
    for name in ("unnamed", "renamed"):
        c[name] = {k: sum((ends[pr.proc] or {}).get(name, {}).get(k, 0)
                          - ((pr.base or {}).get(name) or {}).get(k, 0)
                          for pr in by_proc if ends.get(pr.proc) is not None) for k in ("iseqs", "methods")}
    return c
