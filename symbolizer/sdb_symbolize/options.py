"""How a profile is made from a recording's samples: one typed value (ProfileOptions) for every
choice sdb-symbolize's command line offers about rendering, so a program (the sidecar's
`attach --format`, a pusher) asks for a profile without building argv."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from .labels import LABEL_CONVENTIONS, LABELS_SDB

BY_CHOICES = ("endpoint", "request")


class UsageError(Exception):
    """Options that make no sense, or a filter that matches nothing: one line, exit code 2."""


@dataclass(frozen=True)
class ProfileOptions:
    """Which samples a profile shows, how its stacks are rooted and named, and its format. The
    defaults are sdb-symbolize's."""
    format: str = "collapsed"           # a name of reporters.REPORTERS
    compare_slow: bool = False          # the endpoints' slow requests beside their fast ones, instead of `format`
    # which samples
    idle: bool = False                  # keep samples of blocked threads
    threads: Tuple[str, ...] = ()       # only these threads: name, Linux thread id or serial
    pids: Tuple[int, ...] = ()          # a trace of a process tree: only these processes
    from_s: Optional[float] = None      # only samples taken at least this long after the recording started
    to_s: Optional[float] = None        # ... at most this long after it started
    endpoints: Tuple[str, ...] = ()     # only samples of requests and jobs of these endpoints
    slower_than_ms: Optional[float] = None   # only samples of requests and jobs that took at least this
    # how stacks are rooted and named
    states: bool = False                # each sample's thread state as its root frame
    merge_processes: bool = False       # no process level above the threads of a process tree
    by: Optional[str] = None            # "endpoint"/"request": each sample's unit of work as its root frame
    lines: bool = True                  # frames with their line (False: aggregate by function)
    labels: str = LABELS_SDB            # frame label convention (labels.LABEL_CONVENTIONS)
    sample_type: Optional[str] = None   # the sample type single-type formats show (None: the recording's first: wall)
    # output
    json_frames: bool = False           # json: every sample line carries its frames
    service: Optional[str] = None       # otlp: the resources' service.name (None: the header's, else the process title)

    def __post_init__(self):
        # a list given for a tuple is taken (and frozen) as it is
        for name in ("threads", "pids", "endpoints"):
            object.__setattr__(self, name, tuple(getattr(self, name) or ()))
        if self.by is not None and self.by not in BY_CHOICES:
            raise UsageError(f"by={self.by!r}: say one of {', '.join(BY_CHOICES)}")
        if self.labels not in LABEL_CONVENTIONS:
            raise UsageError(f"labels={self.labels!r}: say one of {', '.join(LABEL_CONVENTIONS)}")
        if self.compare_slow and (not self.endpoints or self.slower_than_ms is None):
            raise UsageError("--compare-slow needs --endpoint NAME and --slower-than TIME")
