"""The eBPF symbolizer's governor: when to pause its ISeq creation probes (each costs the app ~2 us)
and when to attach them again. Times in seconds."""
from __future__ import annotations

from typing import Optional

DEFAULT_MAX_RATE = 5000     # ISeq events per second: ~2.3 us each is ~1 % of one core
BURST_S = 0.1               # a burst of this many seconds' worth of events passes without a pause
BACKOFF_MIN_S = 0.5         # the first pause lasts this long; it doubles while bursts go on ...
BACKOFF_MAX_S = 4.0         # ... up to this
QUIET_S = 5.0               # a pause this long after the last resume starts again from BACKOFF_MIN_S


class Governor:
    """When to pause the creation probes and when to attach them again: a token bucket of
    `max_rate` events per second holding at most BURST_S seconds' worth; when a poll finds it
    overdrawn, pause for a backoff (BACKOFF_MIN_S, doubled for each pause that comes less than
    QUIET_S after the previous resume, at most BACKOFF_MAX_S). Times in seconds; max_rate 0: never."""

    def __init__(self, max_rate: float, now: float):
        self.max_rate = float(max_rate)
        self.capacity = self.max_rate * BURST_S
        self.tokens = self.capacity
        self.last = now
        self.backoff = BACKOFF_MIN_S
        self.paused_until: Optional[float] = None
        self.resumed_at: Optional[float] = None
        self.rate = 0.0                 # events per second over the last poll

    def attached(self, now: float, events: int, spent: bool = False) -> bool:
        """`events` came in since the last call, probes attached. True: pause now. `spent`: the
        probes found the budget spent themselves (they stopped at the record that reached
        `wake_at`): pause, whatever a refill since the last call would allow."""
        dt = max(now - self.last, 1e-6)
        self.rate = events / dt
        self.last = now
        if self.max_rate <= 0:
            return False
        self.tokens = min(self.capacity, self.tokens + dt * self.max_rate) - events
        if self.tokens >= 0 and not spent:
            return False
        if self.resumed_at is not None and now - self.resumed_at < QUIET_S:
            self.backoff = min(self.backoff * 2, BACKOFF_MAX_S)
        else:
            self.backoff = BACKOFF_MIN_S
        self.paused_until = now + self.backoff
        return True

    def wake_at(self, sent: int, poll_s: float) -> int:
        """The count of records sent at which the budget is spent, allowing for the refill until the
        next poll (0: never)."""
        if self.max_rate <= 0:
            return 0
        return sent + int(max(self.tokens, 0) + self.max_rate * poll_s) + 1

    def resume_due(self, now: float) -> bool:
        return self.paused_until is not None and now >= self.paused_until

    def resumed(self, now: float) -> None:
        self.paused_until = None
        self.resumed_at = self.last = now
        self.tokens = self.capacity
