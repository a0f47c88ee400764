"""One process of a recording (recorder.Tree): its Session run in a thread of its own, its records written
as its process number's in the tree's trace, its switch to the next file at a rotation, its counts."""
from __future__ import annotations

import threading
from typing import Optional

from sdb_trace import TraceWriteError, TraceWriter

from ..sampler import _sampler
from .assembly import ReadyProcess
from .options import Options
from .session import realtime_sampling


class ProcessRecording:
    """One process of the trace: its Session, run in a thread of its own (start, drain until it
    ends, the last drain, eBPF detached), its records written as process `proc`'s. `tree`: the
    recorder.Tree it belongs to (its writer, hub and options; told when this one fails or ends)."""

    def __init__(self, tree, proc: int, ready: ReadyProcess, opts: Options):
        target = ready.target
        self.tree = tree
        self.proc = proc
        self.target = target
        self.session = ready.session(tree.writer.for_process(proc), opts, hub=tree.hub)
        self.thread = threading.Thread(target=self._run, name=f"sdb-process-{target.pid}", daemon=True)
        self.title = target.command
        self.counts: Optional[dict] = None
        self.final_stats: Optional[dict] = None     # the sampler's stats when the recording ended
        self.stopped = False            # the tree's recording ended while this one ran
        self.new_writer: Optional[TraceWriter] = None     # rotation: the next file's, until switched
        self.switched = threading.Event()
        self.cut_counts: Optional[dict] = None            # its counts at its last cut (rotation)
        self.base: Optional[dict] = None                  # its counts when the file being written began
        self.crash: Optional[BaseException] = None        # what ended its thread, if sdb failed

    def _run(self) -> None:
        s = self.session
        try:
            s.start()
            if self.tree.opts.children:
                _sampler.prepare_thread(realtime_sampling(self.tree.opts.rate_hz))   # for the next process
            while s.running():
                s.step()
                if self.new_writer is not None:
                    self._switch()
            s.drain_last()
        except TraceWriteError as e:
            self.tree.failed(e)
            s.abort()
        except BaseException as e:
            # a defect of sdb's (nothing the target can cause should get here): this process's
            # recording ends, what it wrote stays, and `record` exits with Exit.FAILED at the end
            s.abort()
            self.crash = e
        finally:
            try:
                s.close()
            finally:
                self.counts = s.counts()
                self.final_stats = s.sampler.stats()
                if self.stopped and self.counts["reason"] in ("stopped", "duration"):
                    self.counts["reason"] = "stopped"
                if self.crash is not None:
                    self.counts["reason"] = "error"
                try:
                    with self.tree.writer.lock:
                        self.tree.writer.process_end(self.proc, **self.counts)
                except TraceWriteError as e:
                    self.tree.failed(e)
                self.tree.ended(self)

    def stats(self) -> dict:
        """The sampler's stats: now, or as the recording ended."""
        return self.final_stats if self.final_stats is not None else self.session.sampler.stats()

    def release(self) -> None:
        """The recording is over and counted: let its sampler's tables and its registry mapping go
        (a tree's recording that runs for days sees many processes come and go)."""
        if self.proc == 0 or self.session.thread.is_alive():
            return                      # the root's Session ends the recording; a stalled sampler still reads
        self.session.drainer = None
        self.session.sampler = None
        self.target.registry = None

    def stop(self) -> None:
        """The recording of the tree is over: this process's ends too (its sampler stops; the thread
        drains what is left)."""
        self.stopped = True
        if self.session.sampler is not None:
            self.session.sampler.stop()

    def rotate(self, writer: TraceWriter) -> None:
        """Go on in the next file (rotation): the thread switches at once (its drain is woken)."""
        self.switched.clear()
        self.new_writer = writer
        self.session.waiter.wakeup.signal()

    def _switch(self) -> None:
        """What the sampler gathered so far goes to the old file; the sampler starts over at the same
        moment, and the records after it go to the new one, which first gets what it needs to stand
        alone (the threads alive, eBPF's state, the open units of work; names as samples show them)."""
        d = self.session.drainer
        d.drain(reset=True)
        d.spans.drain()
        d.writer.flush()
        self.cut_counts = self.session.counts(stats=d.cut)      # what the old file holds of this process
        d.writer.writer = self.new_writer           # d.writer is this process's ProcessWriter
        self.new_writer = None
        d.restate()
        self.switched.set()
