"""One look at every thread's stack, like jstack: innermost frame first.

A few ticks of a recording Session (assembled as every recording's: assembly.ReadyProcess), into
memory (sdb_trace.MemoryTrace) instead of a file, and the frames named by sdb-symbolize's Resolver: a snapshot names a frame exactly as a
recording of the same moment would."""
from __future__ import annotations

from typing import Dict, Tuple

from sdb_symbolize.resolve import Frame, Resolver
from sdb_trace import MemoryTrace

from .assembly import ReadyProcess
from .options import DEFAULTS, Options
from ..target.target import Target, permission_error

TICKS = 5  # a thread whose read is torn twice in one tick gets another tick


class FirstStacks(MemoryTrace):
    """The tables of a few ticks, and each thread's first sampled stack with its time."""

    def __init__(self, header: dict):
        self.first: Dict[int, Tuple[int, int]] = {}     # serial -> (stack id, sample time)
        super().__init__(header)

    def on_samples(self, rec: dict) -> None:
        base = rec["base_ns"]
        for dt, serial, sid in zip(rec["dt_ns"], rec["thread"], rec["stack"]):
            self.first.setdefault(serial, (sid, base + dt))


def snapshot(target: Target, opts: Options = DEFAULTS) -> dict:
    ready = ReadyProcess(target, opts)
    trace = FirstStacks({"pid": target.pid, "ruby": target.info["ruby"], "rate_hz": opts.rate_hz})
    session = ready.session(trace, opts)
    for _ in range(TICKS):
        if not session.tick():
            raise permission_error(target.pid, OSError(ready.sampler.fatal_errno, "read failed"))
        if {t["serial"] for t in target.registry.threads()} <= set(trace.first):
            break
    live = {t["serial"] for t in target.registry.threads()}
    resolver = Resolver(trace.tables)
    out = []
    for serial in sorted(trace.first):
        th = trace.tables.threads.get(serial)
        if serial not in live or th is None or th.get("end_ns") is not None:
            continue  # ended meanwhile
        sid, at_ns = trace.first[serial]
        out.append({"native_id": th["tid"], "name": th["name"] or None, "serial": serial,
                    "frames": [_frame(f) for f in reversed(resolver.stack(sid, at_ns))]})
    return {"pid": target.pid, "ruby": target.info["ruby"], "threads": out}


def _frame(f: Frame) -> dict:
    """A frame as `snapshot --json` gives it; a C function (`cfunc`) located at its Ruby caller."""
    d = {"label": f.label, "path": f.path or None, "line": f.line}
    if f.cfunc:
        d["cfunc"] = True
    return d


def format_text(snap: dict) -> str:
    lines = [f"Process {snap['pid']} (Ruby {snap['ruby']}), {len(snap['threads'])} threads"]
    for t in snap["threads"]:
        name = f'"{t["name"]}"' if t["name"] else "(unnamed)"
        lines.append("")
        lines.append(f"Thread {name} tid={t['native_id']}")
        for f in t["frames"]:
            where = (f"{f['path']}:{f['line']}" if f["line"] else f["path"]) if f["path"] else "?"
            lines.append(f"    {f['label']} ({where})")
    return "\n".join(lines) + "\n"
