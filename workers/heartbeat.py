"""The child's heartbeat: a small thread that tells the parent "still alive" every
``interval`` seconds while a job runs, carrying the job's latest progress.

Silence is how the parent spots a hung child: a handler stuck in C code that holds the
GIL, or a stopped process, starves this thread, and the parent kills the group when the
heartbeat deadline passes. The thread and the main loop share the pipe, so every write
goes through one lock; ``Heartbeat.lock`` is that lock, and the main thread holds it
while it answers a job so that no beat for a finished job can follow its answer.

The same thread keeps the process title current (``worker 3 job 4711 resize (attempt
2)`` or ``worker 3 idle``): setting it costs ~2 µs a call, twice per job, which is a
tenth of a no-op job's round trip; from here it costs the jobs nothing and the title is
at most one interval stale (jobs shorter than that never show, which is no loss).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from shared import wire
from workers.context import JobContext
from workers.proctitle import idle_title, job_title, set_title


class Heartbeat:
    """Beats for the running job. ``begin`` and ``end`` bracket each job; ``end`` must
    be called with ``lock`` held, together with the write of the job's answer."""

    def __init__(self, write: Callable[[bytes], None], interval: float,
                 worker_no: int = 0) -> None:
        self.lock = threading.Lock()
        self.worker_no = worker_no
        self._title = idle_title(worker_no)  # what boot set
        self.interval = interval
        self._write = write
        # One tuple, swapped whole, so the thread never sees a job id with another
        # job's context and ``begin`` needs no lock.
        self._current: tuple[int, JobContext] | None = None
        self._seen_job: int | None = None
        self._seen_seq = 0
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread (once per child)."""
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)
        self._thread.start()

    def begin(self, job_id: int, context: JobContext) -> None:
        """A job starts: beat for it from now on."""
        self._current = (job_id, context)

    def end(self) -> None:
        """The job is answered. Call with ``lock`` held."""
        self._current = None

    def write(self, data: bytes) -> None:
        """Write a frame to the parent with the pipe lock held."""
        with self.lock:
            self._write(data)

    def _run(self) -> None:
        # A plain sleep loop costs the running job nothing; the first beat of a job
        # lands within one interval of its start, well inside the parent's deadline.
        stop = threading.Event()
        while not stop.wait(self.interval):
            try:
                self.beat()
            except OSError:
                return  # the pipe is gone: the main loop sees EOF and exits
            self.refresh_title()

    def refresh_title(self) -> None:
        """Set the process title to the running job, or idle (the thread calls this)."""
        current = self._current
        if current is None:
            title = idle_title(self.worker_no)
        else:
            job_id, context = current
            title = job_title(self.worker_no, job_id, context.kind, context.attempt)
        if title != self._title:
            set_title(title)
            self._title = title

    def beat(self) -> None:
        """Send one heartbeat if a job is running (the thread calls this)."""
        with self.lock:
            current = self._current
            if current is None:
                return
            job_id, context = current
            if job_id != self._seen_job:
                self._seen_job = job_id
                self._seen_seq = 0
            seq, progress = context.take_progress(self._seen_seq)
            self._seen_seq = seq
            self._write(wire.Heartbeat(job_id, progress).encode())
