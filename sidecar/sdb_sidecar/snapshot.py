"""One look at every thread's stack, like jstack: innermost frame first."""
from __future__ import annotations

from sdb_trace import GC_LABEL, KIND_CFUNC, KIND_GC, KIND_RUBY, KIND_TRUNCATED, full_label

from . import _sampler
from .errors import Exit, SdbError
from .symbols import RemoteReadError, RemoteRuby
from .target import Target, permission_error

TICKS = 5  # a thread whose read is torn twice in one tick gets another tick


def snapshot(target: Target, max_depth: int = 2048) -> dict:
    sampler = _sampler.Sampler(target.registry, target.pid, 1000.0, max_depth)
    remote = RemoteRuby(sampler, target.registry.layout)
    threads = {}      # serial -> thread event
    stack_of = {}     # serial -> stack id
    frames, stacks = [], []
    for _ in range(TICKS):
        if not sampler.sample_once():
            raise permission_error(target.pid, OSError(sampler.fatal_errno, "read failed"))
        d = sampler.drain()
        for ev in d["threads"]:
            if not ev["ended"]:
                threads[ev["serial"]] = ev
        frames.extend(zip(d["frame_kind"], d["frame_iseq"], d["frame_pc"], d["frame_me"]))
        stacks.extend(d["stacks"])
        for serial, sid in zip(d["sample_thread"], d["sample_stack"]):
            stack_of.setdefault(serial, sid)
        live = {t["serial"] for t in target.registry.threads()}
        if live <= set(stack_of):
            break
    live = {t["serial"] for t in target.registry.threads()}
    out = []
    names = {}
    for serial in sorted(stack_of):
        if serial not in live or serial not in threads:
            continue  # ended meanwhile
        ev = threads[serial]
        out.append({"native_id": ev["tid"], "name": ev["name"] or None, "serial": serial,
                    "frames": _frames([frames[f] for f in stacks[stack_of[serial]]], remote, names)})
    return {"pid": target.pid, "ruby": target.info["ruby"], "threads": out}


def _frames(raw, remote: RemoteRuby, names: dict) -> list:
    """Frame dicts, innermost first, labelled as rb_profile_frame_full_label (sdb_trace.full_label).
    A C function takes the path and line of the Ruby frame that called it, as Ruby's own
    backtrace does."""
    out = []
    caller = (None, 0)
    for kind, iseq, pc, me in reversed(raw):       # outermost first, to know each caller
        method = None
        if me:
            method = names.get(("me", me), False)
            if method is False:
                try:
                    method = remote.method_info(me)
                except RemoteReadError:
                    method = None
                names[("me", me)] = method
        if kind == KIND_RUBY:
            info = names.get(iseq)
            if info is None:
                try:
                    info = remote.iseq_info(iseq)
                except RemoteReadError:
                    info = {"label": f"(unknown ISeq 0x{iseq:x})", "base_label": "", "path": None}
                names[iseq] = info
            if info.get("c_trace"):
                # a built-in Ruby method Ruby's backtrace shows as a C method (Ruby 3.4, YJIT's
                # Array#each): located at its caller, like one
                out.append({"label": full_label(KIND_RUBY, info, method), "path": caller[0], "line": caller[1]})
                continue
            caller = (info["path"], remote.line(iseq, pc))
            out.append({"label": full_label(KIND_RUBY, info, method), "path": info["path"], "line": caller[1]})
        elif kind == KIND_CFUNC:
            out.append({"label": full_label(KIND_CFUNC, None, method), "path": caller[0], "line": caller[1],
                        "cfunc": True})
        elif kind == KIND_TRUNCATED:
            out.append({"label": "(truncated)", "path": None, "line": 0})
        elif kind == KIND_GC:
            out.append({"label": GC_LABEL, "path": None, "line": 0})
    out.reverse()
    return out


def format_text(snap: dict) -> str:
    lines = [f"Process {snap['pid']} (Ruby {snap['ruby']}), {len(snap['threads'])} threads"]
    for t in snap["threads"]:
        name = f'"{t["name"]}"' if t["name"] else "(unnamed)"
        lines.append("")
        lines.append(f"Thread {name} tid={t['native_id']}")
        for f in t["frames"]:
            where = f"{f['path']}:{f['line']}" if f["path"] else "?"
            lines.append(f"    {f['label']} ({where})")
    return "\n".join(lines) + "\n"
