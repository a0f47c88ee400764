"""The profiles waiting to be sent to one destination: bounded by their bytes. When a new one does
not fit, the oldest go first (a backend that is down costs the oldest intervals, never the
recording's memory), and each is counted."""
from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Deque, Dict, Optional


@dataclass
class Payload:
    """One request's body and what it needs besides (path and query, headers), and what it holds."""
    path: str                       # appended to the destination's URL (with its ?query)
    body: bytes
    headers: Dict[str, str] = field(default_factory=dict)
    profiles: int = 1               # profiles it carries (counted sent or dropped)
    samples: int = 0
    attempts: int = 0


class PayloadQueue:
    """FIFO of Payloads, at most `max_bytes` of bodies (one larger than that alone is dropped as it
    comes). put() never blocks; get() waits up to `timeout` s (None: nothing came, or closed)."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.bytes = 0
        self.dropped = 0                # profiles dropped to make room (or too large alone)
        self.dropped_payloads = 0
        self._items: Deque[Payload] = deque()
        self._cond = threading.Condition()
        self.closed = False

    def put(self, p: Payload) -> None:
        with self._cond:
            if len(p.body) > self.max_bytes:
                self._drop(p)
                return
            while self._items and self.bytes + len(p.body) > self.max_bytes:
                old = self._items.popleft()
                self.bytes -= len(old.body)
                self._drop(old)
            self._items.append(p)
            self.bytes += len(p.body)
            self._cond.notify()

    def _drop(self, p: Payload) -> None:
        self.dropped += p.profiles
        self.dropped_payloads += 1

    def put_back(self, p: Payload) -> None:
        """A payload to try again: first in line, if it still fits beside what came meanwhile."""
        with self._cond:
            if self.bytes + len(p.body) > self.max_bytes:
                self._drop(p)
                return
            self._items.appendleft(p)
            self.bytes += len(p.body)
            self._cond.notify()

    def get(self, timeout: Optional[float]) -> Optional[Payload]:
        with self._cond:
            if not self._items and not self.closed:
                self._cond.wait(timeout)
            if not self._items:
                return None
            p = self._items.popleft()
            self.bytes -= len(p.body)
            return p

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    def profiles(self) -> int:
        with self._cond:
            return sum(p.profiles for p in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()
