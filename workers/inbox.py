"""The child's queue of jobs: the RUN, SKIP and STOP frames its parent sent, read as
they come and taken one job at a time.

The parent keeps each child's pipe stocked with a few jobs, so that the child never
waits for it between two jobs. Before it starts each job the child looks at the pipe
without blocking (``poll``), so a STOP or SKIP the parent wrote behind the queued jobs
is seen in time: a child told STOP starts none of its queued jobs, and a skipped job
never starts (the child says SKIPPED for it). Only when it holds no job does the child
block (``wait``).

The read end is non-blocking for that look: one ``read`` that finds nothing costs
about a microsecond, a ``poll`` call more than that.

While a handler runs, the heartbeat thread reads the pipe too (issue 28), so that a
STOPPING notice or the CHECKPOINTED answer to a flushed checkpoint reaches the running
job; ``lock`` keeps the two readers apart, and ``on_stopping`` / ``on_checkpointed`` are
called with it held.
"""

from __future__ import annotations

import os
import select
import threading
from collections import deque
from collections.abc import Callable

from shared import wire

_RUN = wire.RUN
_SKIP = wire.SKIP
_STOP = wire.STOP
_STOPPING = wire.STOPPING
_CHECKPOINTED = wire.CHECKPOINTED
_decode_run = wire.Run.decode
_CHUNK = 1 << 16


class JobInbox:
    """Frames from the parent on a non-blocking fd: queued jobs, skips and STOP."""

    def __init__(self, fd: int, max_body: int = wire.DEFAULT_MAX_BODY) -> None:
        self.fd = fd
        self._reader = wire.FrameReader(max_body)
        self._runs: deque[wire.Frame] = deque()
        self._skipped: set[int] = set()
        self._poller = select.poll()
        self._poller.register(fd, select.POLLIN)
        self.stopped = False  # told STOP: start nothing more
        self.closed = False  # end of file: the parent is gone
        self._dropped: list[int] = []  # skipped jobs passed over, not yet reported
        self.lock = threading.Lock()
        self.on_stopping: Callable[[wire.Stopping], None] | None = None
        self.on_checkpointed: Callable[[wire.Checkpointed], None] | None = None

    @property
    def queued(self) -> int:
        """Jobs received and not taken yet (skipped ones included until passed)."""
        return len(self._runs)

    def poll(self) -> None:
        """Take in whatever the parent sent so far, without blocking. Raises
        ``OSError`` if the fd cannot be read (a handler closed it)."""
        with self.lock:
            self._poll()

    def _poll(self) -> None:
        read = os.read
        fd = self.fd
        while not self.closed:
            try:
                data = read(fd, _CHUNK)
            except BlockingIOError:
                return
            if not data:
                self.closed = True
                return
            self._take(self._reader.feed(data))
            if len(data) < _CHUNK:
                return  # the pipe is empty now; a second read would only say so

    def wait(self) -> None:
        """Block until a job, STOP or end of file is there."""
        while not (self._runs or self.stopped or self.closed):
            try:
                self._poller.poll()
            except InterruptedError:
                continue
            self.poll()

    def wait_readable(self, timeout: float) -> None:
        """Block until the pipe has bytes to read or ``timeout`` seconds passed."""
        try:
            self._poller.poll(timeout * 1000)
        except InterruptedError:
            pass

    def next_run(self) -> wire.Run | None:
        """The next job to start, or None (none queued, or told STOP: queued jobs stay
        unstarted and the parent gives them back)."""
        with self.lock:
            return self._next_run()

    def _next_run(self) -> wire.Run | None:
        runs = self._runs
        while runs and not self.stopped:
            run = _decode_run(runs.popleft())
            if run.id in self._skipped:
                self._skipped.discard(run.id)
                self._dropped.append(run.id)
                continue
            return run
        return None

    def take_dropped(self) -> bytes:
        """SKIPPED frames for the skipped jobs passed over since the last call (empty
        if none): the parent gives such a job back only once it reads one."""
        if not self._dropped:
            return b""
        frames = b"".join(wire.Skipped(job_id).encode() for job_id in self._dropped)
        self._dropped.clear()
        return frames

    def _take(self, frames: list[wire.Frame]) -> None:
        for frame in frames:
            mtype = frame.type
            if mtype == _RUN:
                self._runs.append(frame)
            elif mtype == _SKIP:
                self._skipped.add(wire.Skip.decode(frame).job)
            elif mtype == _STOP:
                self.stopped = True
            elif mtype == _STOPPING:
                if self.on_stopping is not None:
                    self.on_stopping(wire.Stopping.decode(frame))
            elif mtype == _CHECKPOINTED and self.on_checkpointed is not None:
                self.on_checkpointed(wire.Checkpointed.decode(frame))
