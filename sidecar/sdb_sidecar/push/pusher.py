"""The push side of a recording: a thread that cuts the recording's stream every interval into
profiles (cutter) and encodes them per destination (pyroscope, otlp), and per destination a thread
that sends them from a bounded queue (queue, transport), retrying with backoff and jitter where a
later try can succeed. The sampler and the drainers never wait on any of it: their only cost is the
tap's append. Problems are told once each, one line, no traceback; every profile made is counted
sent or dropped."""
from __future__ import annotations

import os
import random
import sys
import threading
import time
from typing import Callable, Dict, List, Optional

from sdb_trace.output import printable

from .. import __version__
from . import otlp, pyroscope
from .config import PushConfig
from .cutter import IntervalCutter, Interval, StreamTap
from .queue import PayloadQueue
from .transport import DROP, SENT, Transport

BACKOFF_FIRST_S = 1.0
CUT_AFTER_S = 0.25              # a cut waits this long after its grid point for the interval's last samples
BACKOFF_MAX_S = 30.0
RETRY_AFTER_MAX_S = 300.0
PROTOCOLS = {"pyroscope": pyroscope.encode, "otlp": otlp.encode}
USER_AGENT = f"sdb/{__version__}"


def service_of(command, fallback: str = "ruby") -> str:
    """The default service name: the program the process runs (`ruby app.rb` -> app, `puma: cluster
    worker 0` -> puma, `bin/rails server` -> rails)."""
    words = [w for w in (command or []) if w]
    if not words:
        return fallback
    # a title is one word with spaces (`puma 5.6.5 (tcp://0.0.0.0:3000) [app]`): its first word's
    first = os.path.basename(words[0].split()[0]).split(":")[0] if words[0].strip() else ""
    if first.startswith("ruby") and len(words) > 1:
        script = next((w for w in words[1:] if not w.startswith("-")), "")
        first = os.path.splitext(os.path.basename(script))[0] or first
    return first or fallback


class Sender:
    """One destination: its queue and the thread that empties it."""

    def __init__(self, kind: str, url: str, config: PushConfig, notice: Callable[[str], None]):
        self.kind, self.url = kind, url
        self.name = f"{kind}={url}"
        self.queue = PayloadQueue(config.queue_bytes)
        self.transport = Transport(url, config.ca_file, config.timeout_s, config.headers)
        self.notice = notice
        self.sent = self.retried = self.rejected = self.unsent = 0
        self.told: set = set()          # kinds of failure told since the last success
        self.finishing = threading.Event()
        self.deadline: Optional[float] = None
        self.thread = threading.Thread(target=self._run, name=f"sdb-push-{kind}", daemon=True)
        self._backoff = BACKOFF_FIRST_S
        self.in_flight = None

    def _tell(self, kind: str, message: str) -> None:
        if kind not in self.told:
            self.told.add(kind)
            self.notice(message)

    def _run(self) -> None:
        while True:
            p = self.queue.get(timeout=0.5)
            if p is None:
                if self.queue.closed:
                    return
                continue
            if self.deadline is not None and time.monotonic() > self.deadline:
                self.unsent += p.profiles
                continue
            self.in_flight = p
            out = self.transport.post(p, USER_AGENT)
            self.in_flight = None
            p.attempts += 1
            if out.verdict == SENT:
                self.sent += p.profiles
                self.told.clear()
                self._backoff = BACKOFF_FIRST_S
            elif out.verdict == DROP:
                self.rejected += p.profiles
                self._tell(out.kind, out.message + f"; {p.profiles} profile{'s' if p.profiles != 1 else ''} dropped")
            else:
                self._tell(out.kind, out.message)
                if self.finishing.is_set():
                    self.unsent += p.profiles
                    continue
                self.retried += 1
                if out.retry_after_s is not None:
                    delay = min(out.retry_after_s, RETRY_AFTER_MAX_S)
                else:
                    delay = self._backoff * random.uniform(0.5, 1.0)       # jitter: not every sidecar at once
                    self._backoff = min(self._backoff * 2, BACKOFF_MAX_S)
                self.queue.put_back(p)
                self.finishing.wait(delay)

    def counts(self) -> dict:
        return {"sent": self.sent, "retried": self.retried, "dropped": self.dropped,
                "dropped_queue_full": self.queue.dropped, "rejected": self.rejected, "unsent_at_exit": self.unsent}

    @property
    def dropped(self) -> int:
        return self.queue.dropped + self.rejected + self.unsent


class Pusher:
    """Started with the recording (`tap` goes to each TraceWriter), finished after its last sample
    was written (`finish`: the last interval is cut and sent, within `finish_s`)."""

    def __init__(self, config: PushConfig, command=None, stream=None, app_service: Optional[str] = None):
        self.config = config
        self.stream = stream or sys.stderr
        self.tap = StreamTap()
        # intervals on a grid from the pusher's start (interval, 2 x interval, ...), by the samples' own
        # moments: a cut that comes late (a busy machine) still sends one profile per interval
        self._t0 = time.monotonic()
        self.cutter = IntervalCutter(self.tap, int(self._t0 * 1e9), int(config.interval_s * 1e9))
        # --service, else the app's (its gem's registry: Target.service), else from its process title
        self.service = config.service or app_service or service_of(command)
        self.senders = [Sender(d.kind, d.url, config, self._notice) for d in config.destinations]
        self.profiles = 0               # intervals cut into profiles (each sent to every destination)
        self.samples = 0
        self.render_failed = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name="sdb-push-cut", daemon=True)

    def _notice(self, message: str) -> None:
        try:
            tty = hasattr(self.stream, "isatty") and self.stream.isatty()
            self.stream.write(f"{chr(13) + chr(27) + '[K' if tty else ''}sdb: push: {message}\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass

    def start(self) -> None:
        for s in self.senders:
            s.thread.start()
        self.thread.start()

    def _run(self) -> None:
        # cuts at the grid's points (a late cut does not shift the next), a little after each so the
        # interval's last samples are written (the sampler writes a batch every few ms)
        every, t0, k = self.config.interval_s, self._t0, 1
        while not self._stop.wait(max(0.0, t0 + k * every + CUT_AFTER_S - time.monotonic())):
            self.cut(time.monotonic_ns())
            k = int((time.monotonic() - t0) // every) + 1

    def cut(self, now_ns: Optional[int] = None) -> None:
        """Hands over the intervals over by now_ns (None: every sample, the recording is over)."""
        with self._lock:
            self.samples += self.cutter.cut(self._interval, now_ns)

    def _interval(self, interval: Interval) -> None:
        self.profiles += 1
        for s in self.senders:
            try:
                payloads = PROTOCOLS[s.kind](interval, self.service, self.config.ingest)
            except Exception as e:      # a defect in making the profile: this interval is lost for it, counted
                self.render_failed += 1
                s.rejected += 1
                s._tell("render", f"cannot make the {s.kind} profile: {type(e).__name__}: {printable(str(e))} "
                                  f"(a bug in sdb: please report this line); the trace file has the samples")
                continue
            for p in payloads:
                p.profiles = 0
            if payloads:
                payloads[0].profiles = 1        # an interval counts once per destination, sent or dropped
                for p in payloads:
                    s.queue.put(p)

    def finish(self, finish_s: Optional[float] = None) -> Dict[str, dict]:
        """The recording is over (every sample written): cut the last interval, give the senders
        `finish_s` (default: one connect and answer timeout, twice) to send what is queued; what is
        left is counted unsent. Returns the counts."""
        self._stop.set()
        self.thread.join()
        self.cut()
        wait = finish_s if finish_s is not None else 2 * (5.0 + self.config.timeout_s)
        deadline = time.monotonic() + wait
        for s in self.senders:
            s.deadline = deadline
            s.finishing.set()
            s.queue.close()
        for s in self.senders:
            s.thread.join(max(0.0, deadline - time.monotonic()) + 1.0)
        for s in self.senders:
            if s.thread.is_alive():     # a request still in the air past the deadline: what it carries is unsent
                s.unsent += s.queue.profiles() + (s.in_flight.profiles if s.in_flight is not None else 0)
        return self.counts()

    def abandon(self) -> None:
        """The recording failed: stop cutting and sending now, without waiting (nothing more is told)."""
        self._stop.set()
        for s in self.senders:
            s.deadline = 0.0
            s.notice = lambda message: None
            s.finishing.set()
            s.queue.close()

    def counts(self) -> Dict[str, dict]:
        return {"profiles": self.profiles, "samples": self.samples,
                "destinations": {s.name: s.counts() for s in self.senders}}

    @staticmethod
    def result_lines(counts: Dict[str, dict]) -> List[str]:
        """After the recording: one line per destination (from the end record's `push` counts)."""
        lines = []
        for name, c in counts["destinations"].items():
            why = [f"{c[k]} {w}" for k, w in (("dropped_queue_full", "with the queue full"),
                                              ("rejected", "refused or failed"),
                                              ("unsent_at_exit", "unsent at the end")) if c[k]]
            lines.append(f"sdb: pushed {c['sent']} of {counts['profiles']} intervals' profiles to {printable(name)}: "
                         f"{c['retried']} retries, {c['dropped']} dropped" + (f" ({', '.join(why)})" if why else ""))
        return lines

    def summary(self) -> str:
        """For the status line: `pushed 4, retried 1, dropped 0` (summed over destinations)."""
        sent = sum(s.sent for s in self.senders)
        retried = sum(s.retried for s in self.senders)
        dropped = sum(s.dropped for s in self.senders)
        return f"pushed {sent}, retried {retried}, dropped {dropped}"
