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

A DISCARDED frame (a job the parent discarded after its own child died) is kept apart
(``take_discarded``): the child runs its ``on_discard`` hooks between two jobs, and an
idle child wakes for it.

A job whose ``expires_at`` has passed when its turn comes never starts either: the
child answers FAILED of kind ``expired`` for it, without a START (issue 28).

While a long job runs, the heartbeat thread ``skim``s the pipe: a SKIP for a job queued
behind it is answered SKIPPED at once, so the parent can give that job to an idle child
instead of leaving it behind the long one (the parent's recall). Every method takes
``lock``, so the thread and the main loop never read the pipe or the queue at once.

While a handler runs, the heartbeat thread reads the pipe too (issue 28), so that a
STOPPING notice or the CHECKPOINTED answer to a flushed checkpoint reaches the running
job; ``on_stopping`` / ``on_checkpointed`` are called with ``lock`` held.

The thread reads (``look``, ``skim``) only while the main loop is not blocked in
``wait``: a look the thread began just before the job ended could otherwise take the
next RUN off the pipe after ``wait`` found the queue empty and before it blocked, and
the child slept on an empty pipe with a job queued (found stalled at 19,998 of 20,000
jobs in the pool benchmark, until the parent's heartbeat timeout killed it).
"""

from __future__ import annotations

import os
import select
import threading
import time
from collections import deque
from collections.abc import Callable

from shared import wire
from shared.jobs import FAIL_EXPIRED

_RUN = wire.RUN
_SKIP = wire.SKIP
_STOP = wire.STOP
_STOPPING = wire.STOPPING
_CHECKPOINTED = wire.CHECKPOINTED
_DISCARDED = wire.DISCARDED
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
        self._waiting = False  # the main loop blocks in ``wait``: the thread reads nothing
        self.closed = False  # end of file: the parent is gone
        # Answers for jobs passed over (SKIPPED, or FAILED as expired), in order, not
        # yet written.
        self._dropped: list[bytes] = []
        self._discarded: list[wire.Frame] = []  # DISCARDED frames, for on_discard hooks
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

    @property
    def has_discarded(self) -> bool:
        """Whether DISCARDED frames wait for ``take_discarded``."""
        return bool(self._discarded)

    def take_discarded(self) -> list[wire.Discarded]:
        """The jobs the parent told discarded since the last call, in order."""
        with self.lock:
            frames, self._discarded = self._discarded, []
        return [wire.Discarded.decode(frame) for frame in frames]

    def look(self) -> None:
        """The heartbeat thread's ``poll``: take in what the parent sent, unless the
        main loop is blocked in ``wait`` (it reads the pipe itself when it wakes)."""
        with self.lock:
            if not self._waiting:
                self._poll()

    def wait(self) -> None:
        """Block until a job, a DISCARDED, STOP or end of file is there. The check and
        the last read before blocking are made under ``lock``, and from then until
        this wakes the thread reads nothing: every byte it could have taken stays on
        the pipe and wakes this."""
        try:
            while True:
                with self.lock:
                    self._poll()
                    if self._runs or self._discarded or self.stopped or self.closed:
                        return
                    self._waiting = True
                try:
                    self._poller.poll()
                except InterruptedError:
                    pass
        finally:
            self._waiting = False

    def wait_readable(self, timeout: float) -> None:
        """Block until the pipe has bytes to read or ``timeout`` seconds passed."""
        try:
            self._poller.poll(timeout * 1000)
        except InterruptedError:
            pass

    def next_run(self) -> wire.Run | None:
        """The next job to start, or None (none queued, or told STOP: queued jobs stay
        unstarted and the parent gives them back). Skipped and expired jobs are passed
        over, their answers kept for ``take_dropped``."""
        with self.lock:
            runs = self._runs
            while runs and not self.stopped:
                run = _decode_run(runs.popleft())
                if run.id in self._skipped:
                    self._skipped.discard(run.id)
                    self._dropped.append(wire.Skipped(run.id).encode())
                    continue
                if run.expires_at is not None and time.time() >= run.expires_at:
                    self._dropped.append(_expired(run))
                    continue
                return run
            return None

    def take_dropped(self) -> bytes:
        """The answers for jobs passed over since the last call (empty if none):
        SKIPPED for a skipped job (the parent gives it back only once it reads one),
        FAILED of kind ``expired`` for one whose moment passed while it was queued."""
        with self.lock:
            if not self._dropped:
                return b""
            frames = b"".join(self._dropped)
            self._dropped.clear()
            return frames

    def skim(self) -> bytes:
        """Read what the parent sent while a job runs, and drop at once the queued jobs
        it asked back (SKIP): returns their SKIPPED frames (empty if none), to be
        written now. Raises ``OSError`` if the fd cannot be read."""
        with self.lock:
            if self._waiting:
                return b""
            self._poll()
            skipped = self._skipped
            if not skipped or not self._runs:
                return b""
            # Only its own answers: those ``next_run`` kept must follow the answer the
            # main loop is about to write, for the job ahead of them.
            answers: list[bytes] = []
            kept: deque[wire.Frame] = deque()
            for frame in self._runs:
                job_id = _decode_run(frame).id
                if job_id in skipped:
                    skipped.discard(job_id)
                    answers.append(wire.Skipped(job_id).encode())
                else:
                    kept.append(frame)
            self._runs = kept
            return b"".join(answers)

    def _take(self, frames: list[wire.Frame]) -> None:
        for frame in frames:
            mtype = frame.type
            if mtype == _RUN:
                self._runs.append(frame)
            elif mtype == _SKIP:
                job_id = wire.Skip.decode(frame).job
                # A SKIP follows its job's RUN on the pipe. With no RUN of that job
                # queued, the job was taken before the SKIP was read (the parent learns
                # so from its START); kept, the SKIP would pass over the next RUN of the
                # same job, its next attempt, which the parent then waits for forever.
                if any(_decode_run(run).id == job_id for run in self._runs):
                    self._skipped.add(job_id)
            elif mtype == _STOP:
                self.stopped = True
            elif mtype == _STOPPING:
                if self.on_stopping is not None:
                    self.on_stopping(wire.Stopping.decode(frame))
            elif mtype == _DISCARDED:
                self._discarded.append(frame)
            elif mtype == _CHECKPOINTED and self.on_checkpointed is not None:
                self.on_checkpointed(wire.Checkpointed.decode(frame))


def _expired(run: wire.Run) -> bytes:
    return wire.Failed(run.id, FAIL_EXPIRED,
                       f"expired before it started (expires_at "
                       f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(run.expires_at or 0))}"
                       " UTC)").encode()
