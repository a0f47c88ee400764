"""--max-cpu: the agent's own CPU (every thread of it: the samplers, the drains, the pushes), measured
over windows of WINDOW_S, against a budget in % of one core. Over it, the rate is lowered in
proportion (never under MIN_RATE_HZ, never raised again): a running sampler's rate cannot change
without its samples' weight changing in the middle of a trace, so every recording restarts at the new
rate (its last interval pushed, its file closed; the next scan records the process again)."""
from __future__ import annotations

import os
import time
from typing import Optional

WINDOW_S = 10.0             # CPU is measured over this long ...
SETTLE_S = 5.0              # ... after a change of rate has settled this long (restarts name anew)
MIN_RATE_HZ = 10.0
MARGIN = 0.9                # the new rate aims this far under the budget


class CpuBudget:
    def __init__(self, max_pct: float):
        self.max_pct = max_pct
        self._start(time.monotonic())

    def _start(self, now: float) -> None:
        t = os.times()
        self.t0, self.cpu0 = now, t.user + t.system

    def settle(self) -> None:
        """A change was made: the next window starts SETTLE_S from now."""
        self._start(time.monotonic() + SETTLE_S)
        self.cpu0 = None

    def lower(self, rate_hz: float) -> Optional[tuple]:
        """At the end of a window: (measured %, the rate to take) when over the budget and the rate
        can go lower; else None. Called as often as the caller likes."""
        now = time.monotonic()
        if now < self.t0:
            return None
        if self.cpu0 is None:
            self._start(now)
            return None
        if now - self.t0 < WINDOW_S:
            return None
        t = os.times()
        pct = 100.0 * (t.user + t.system - self.cpu0) / (now - self.t0)
        self._start(now)
        if pct <= self.max_pct or rate_hz <= MIN_RATE_HZ:
            return None
        return pct, max(MIN_RATE_HZ, rate_hz * MARGIN * self.max_pct / pct)
