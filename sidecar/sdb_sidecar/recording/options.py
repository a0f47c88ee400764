"""How a recording runs: one type, every default written once (the commands' options and --help,
snapshot and top take them from here)."""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..ebpf.governor import DEFAULT_MAX_RATE

TOP_RATE_HZ = 100.0          # top samples more gently by default: it is watched, not kept
TOP_WINDOW_S = 10.0


@dataclass(frozen=True)
class Options:
    rate_hz: float = 1000.0          # samples per second
    duration_s: float = 0.0          # 0: until Ctrl-C, SIGTERM or the target's exit
    max_depth: int = 2048            # frames read per stack at most
    quiet: bool = False              # no status line
    ebpf: bool = True                # name ISeqs at birth with eBPF where the machine allows it
    ebpf_max_rate: float = DEFAULT_MAX_RATE   # ISeqs/s above which eBPF's creation probes pause (0: never)
    in_context: bool = True          # with eBPF: running threads' stacks read on their own CPU (incontext.py)
    from_start: bool = False         # the recording covers the target since it published its registry
                                     # (`record`): its requests/jobs since then are all in the trace
    children: bool = True            # attach, record: the target's descendants that run the gem too
    rotate_s: float = 0.0            # a new trace file every this many seconds (0: one file) ...
    rotate_bytes: int = 0            # ... or once the file holds this many bytes (0: never)
    keep: int = 12                   # rotated files kept (the newest; older ones are removed)
    push: object = None              # a push.config.PushConfig: profiles pushed while recording (None: not)

    @classmethod
    def from_args(cls, args, **overrides) -> "Options":
        """From the parsed command line of attach, record or top (options a command lacks keep
        their defaults)."""
        d = DEFAULTS
        opts = cls(rate_hz=getattr(args, "rate", d.rate_hz), duration_s=getattr(args, "duration", d.duration_s),
                   max_depth=getattr(args, "max_depth", d.max_depth), quiet=getattr(args, "quiet", d.quiet),
                   ebpf=not getattr(args, "no_ebpf", not d.ebpf),
                   ebpf_max_rate=getattr(args, "ebpf_max_rate", d.ebpf_max_rate),
                   in_context=not getattr(args, "no_in_context", not d.in_context),
                   children=not getattr(args, "no_children", not d.children),
                   rotate_s=(getattr(args, "rotate", None) or (0.0, 0))[0],
                   rotate_bytes=(getattr(args, "rotate", None) or (0.0, 0))[1],
                   keep=getattr(args, "keep", d.keep))
        return replace(opts, **overrides)


DEFAULTS = Options()
