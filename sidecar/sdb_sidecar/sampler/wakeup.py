"""An eventfd that wakes a thread sleeping in `select`: the recorder's drain loop (written by the
sampler's nogil loop, `Sampler.set_wake_fd`, and by the sampler thread as it ends) and the eBPF
reader (written by `close()`)."""
from __future__ import annotations

import os
import select
from typing import Iterable, List


class Wakeup:
    def __init__(self) -> None:
        # non-blocking: a writer never waits (a full counter only means a wake-up is pending)
        self.fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)

    def signal(self) -> None:
        os.eventfd_write(self.fd, 1)

    def wait(self, fds: Iterable[int], timeout_s: float) -> List[int]:
        """Until one of fds is readable, this is signalled, or timeout_s; the fds that are ready
        (this one's included, its signals then cleared)."""
        ready = select.select([self.fd, *fds], [], [], timeout_s)[0]
        if self.fd in ready:
            try:
                os.eventfd_read(self.fd)
            except BlockingIOError:
                pass                    # another waiter cleared it first
        return ready

    def close(self) -> None:
        os.close(self.fd)
        self.fd = -1
