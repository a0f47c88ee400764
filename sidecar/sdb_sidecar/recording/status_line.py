"""The recording's one status line on stderr (attach, record): processes, threads, samples, the rate
achieved, torn and late reads, frames left unnamed, eBPF pauses."""
from __future__ import annotations

import time
from typing import Optional

STATUS_INTERVAL_S = 0.5


class StatusLine:
    """One line on stderr, redrawn at most twice a second: processes, threads, samples, rate, torn %,
    late %. `tree`: a recorder.Tree (its processes); else `drainer` alone."""

    def __init__(self, stream, quiet: bool, rate_hz: float, tree=None, drainer=None):
        self.stream = stream
        self.tree = tree
        self.drainer = drainer
        self.quiet = quiet
        self.rate_hz = rate_hz
        self.last = 0.0
        self.tty = hasattr(stream, "isatty") and stream.isatty()

    def _sources(self):
        if self.tree is not None:
            prs = [pr for pr in self.tree.by_proc if pr.thread.ident is not None or pr.proc == 0]
            return [pr.stats() for pr in prs], [pr.session.drainer for pr in prs if pr.session.drainer is not None]
        return [], [self.drainer] if self.drainer is not None else []

    def text(self, st: Optional[dict] = None) -> str:
        stats, drainers = self._sources()
        if st is not None:
            stats = [st]
        root = stats[0]
        elapsed = max(1e-9, (root["last_tick_ns"] - root["start_ns"]) / 1e9) if root["ticks"] > 1 else 0
        rate = (root["ticks"] - 1) / elapsed if elapsed else 0.0
        samples = sum(s["samples"] for s in stats)
        reads = samples + sum(s["torn"] for s in stats)
        torn = 100.0 * sum(s["torn"] for s in stats) / reads if reads else 0.0
        due = root["ticks"] + root["missed"]
        late = 100.0 * (root["late"] + root["missed"]) / due if due else 0.0
        threads = sum(s["threads"] for s in stats)
        procs = f"{len(stats)} processes, " if len(stats) > 1 else ""
        text = (f"sdb: {procs}{threads} threads, {samples} samples, {rate:.0f} Hz "
                f"(asked {self.rate_hz:.0f}), torn {torn:.2f}%, late {late:.2f}%")
        unnamed = sum(d.unnamed_iseqs + d.unnamed_methods - d.renamed_iseqs - d.renamed_methods for d in drainers)
        if unnamed:
            text += f", unnamed {unnamed}"
        ebpf = drainers[0].ebpf if drainers else None
        pauses = len(ebpf.pauses) if ebpf is not None else 0
        pusher = getattr(self.tree, "pusher", None)
        if pusher is not None:
            text += ", " + pusher.summary()
        if pauses:
            text += (f", eBPF paused {pauses}x (ISeqs created > {ebpf.max_rate:g}/s"
                     f"{', now' if ebpf.paused else ''})")
        return text

    def update(self, st: Optional[dict] = None) -> None:
        now = time.monotonic()
        if self.quiet or now - self.last < STATUS_INTERVAL_S or not self.tty:
            return
        self.last = now
        self.stream.write("\r\x1b[K" + self.text(st))
        self.stream.flush()

    def finish(self, st: Optional[dict] = None) -> None:
        if self.quiet:
            return
        self.stream.write(("\r\x1b[K" if self.tty else "") + self.text(st) + "\n")
        self.stream.flush()
