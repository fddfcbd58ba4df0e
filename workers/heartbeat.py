"""The child's heartbeat: a small thread that tells the parent "still alive" every
``interval`` seconds while a job runs, carrying the job's latest progress, and keeps the
process title on the running job.

Silence is how the parent starts to suspect a hung child: a handler in C code that holds
the GIL, or a stopped process, starves this thread. Silence alone cannot tell busy from
stuck, so once the deadline passes the parent reads the child's CPU time and state
(``supervisor.pool.process.ChildProcess.silent``): CPU time moving is busy native code,
left to run; a stopped process, or neither beats nor CPU for the timeout, is hung.

The thread and the main loop share the pipe, so every write goes through one lock;
``Heartbeat.lock`` is that lock, and the main thread holds it while it answers a job so
that no beat for a finished job can follow its answer.

Titles (``worker 3 job 4711 resize (attempt 2)`` or ``worker 3 idle``) are set from
here, not from the job's path: a title costs ~2 µs a call, twice per job, which is a
tenth of a no-op job's round trip. The thread wakes ``FIRST_LOOK`` seconds after it
first saw the job it finds running, and every ``TITLE_LAG`` once that job has run that
long, so ``ps`` shows a job within about twice ``FIRST_LOOK`` of its start (a job
shorter than that may never show, and costs nothing). Each wake is the cost, not what it
does: on a 2-vCPU VM a wake beside a sleeping handler cost its child 0.13-0.16 ms, as
much as the rest of the runtime's path for a job of 20 ms. Waking every ``TITLE_LAG``
whatever ran meant a wake per job of 20 ms; now a stream of short jobs wakes it once per
``FIRST_LOOK``, while a job that lasts keeps the 20 ms cadence. Once a child has been
idle for ``IDLE_NAP`` seconds its thread sleeps until ``begin`` wakes it (or the next
beat is due), so idle children cost nothing; only the first job after such a nap pays
for the wake (~1 µs). Waking the thread at every job instead would cost a stream of
short jobs a thread switch each.

A job that has run a while is looked at less often: every ``LOOK_SHARE`` of its run time
so far, at most every ``MAX_LOOK`` seconds (issue 31). Each look takes the GIL from the
handler: 50 looks a second cost a pure-Python job 0.5-0.9% of its wall time (measured on
this project's 2-core machine), all of its life, for an hour-long job 180,000 times.
What a look does for a job that old waits a little longer: a stop notice or a SKIP is
read within a tenth of the job's age (a job queued behind an overrunning head is asked
back no sooner than 50 ms into it, and answered at the thread's first look at that
head). A job that begins while the thread is in such a long look wakes it, so the next
job's title and notices are on time again; that wake costs only jobs that follow a long
one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from shared import wire
from workers.context import JobContext
from workers.jobpipe import JobPipe
from workers.proctitle import idle_title, job_title, set_title

TITLE_LAG = 0.02  # seconds between looks at the title: ps follows the job within this
IDLE_NAP = 1.0  # idle this long, the thread sleeps until a job begins
# A job running this long has its pipe watched (``watch``) at each look: the parent
# recalls the jobs queued behind a long one no sooner than 50 ms into it.
WATCH_AFTER = 0.04
# The thread sleeps this long after it first sees a job; only a job still running then
# is looked at every TITLE_LAG. A stream of shorter jobs wakes it once per FIRST_LOOK.
FIRST_LOOK = 0.05
LOOK_SHARE = 0.1  # a job that has run t seconds is looked at every LOOK_SHARE * t...
MAX_LOOK = 0.25  # ...but at least this often, and never more often than TITLE_LAG


class Heartbeat:
    """Beats for the running job. ``begin`` and ``end`` bracket each job; ``end`` must
    be called with ``lock`` held, together with the write of the job's answer."""

    def __init__(self, pipe: JobPipe, interval: float, worker_no: int = 0) -> None:
        self.lock = threading.Lock()
        self.worker_no = worker_no
        self._title = idle_title(worker_no)  # what boot set
        self.interval = interval
        self._pipe = pipe
        # One tuple, swapped whole, so the thread never sees a job id with another
        # job's context and ``begin`` needs no lock.
        self._current: tuple[int, JobContext] | None = None
        self._seen_job: int | None = None
        self._seen_seq = 0
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()
        self._sleeping = False  # the thread waits on _wake until a job begins
        self._long_look = False  # the thread waits on _wake longer than TITLE_LAG
        # Called at each look while a job runs: reads the parent's notices (issue 28).
        self.listen: Callable[[], None] | None = None
        # Called at each look once a job has run WATCH_AFTER seconds: frames to write
        # now (the inbox's answers to SKIPs that came during the job). None: not set.
        self.watch: Callable[[], bytes] | None = None

    def start(self) -> None:
        """Start the thread (once per child)."""
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)
        self._thread.start()

    def begin(self, job_id: int, context: JobContext) -> None:
        """A job starts: beat for it from now on."""
        self._current = (job_id, context)
        # Set after _current, read by the thread before it re-checks _current: one of
        # the two always sees the other.
        if self._sleeping or self._long_look:
            self._wake.set()

    def end(self) -> None:
        """The job is answered. Call with ``lock`` held."""
        self._current = None

    @property
    def current(self) -> tuple[int, JobContext] | None:
        """The job beaten for now (its id and context), or None."""
        return self._current

    def write(self, data: bytes) -> None:
        """Write a frame to the parent with the pipe lock held."""
        with self.lock:
            self._pipe.write(data)

    def _run(self) -> None:
        # The first beat of a job lands within one interval of its start, well inside
        # the parent's deadline.
        interval = self.interval
        look = min(TITLE_LAG, interval)
        first_look = min(FIRST_LOOK, interval)
        wake = self._wake
        clock = time.monotonic
        now = clock()
        next_beat = now + interval
        busy_at = now  # when a job was last seen running
        watched_job: int | None = None  # the job whose run time ``since`` counts
        since = now
        while True:
            if self._current is None and now - busy_at >= IDLE_NAP:
                self._sleeping = True
                if self._current is None:
                    wake.wait(max(0.0, next_beat - now))
                self._sleeping = False
                wake.clear()
            else:
                current = self._current
                wait = first_look  # a job not seen yet, or none: next look, if it lasts
                young = True
                if current is not None and current[0] == watched_job:
                    age = now - since
                    young = age < first_look
                    wait = first_look - age if young else \
                        max(look, min(MAX_LOOK, LOOK_SHARE * age))
                if wait > look and not young:
                    self._long_look = True
                    if self._current is current:
                        wake.wait(wait)
                    self._long_look = False
                    wake.clear()
                else:
                    time.sleep(wait)
            self.refresh_title()
            now = clock()
            current = self._current
            if current is not None:
                busy_at = now
                if self.listen is not None:
                    try:
                        self.listen()
                    except (OSError, wire.ProtocolError):
                        pass  # the pipe is gone, replaced or garbled: the main loop sees it
                if current[0] != watched_job:
                    watched_job, since = current[0], now
                elif self.watch is not None and now - since >= WATCH_AFTER:
                    self._watch()
            if now < next_beat:
                continue
            next_beat = now + interval
            try:
                self.beat()
            except OSError:
                return  # the pipe is gone: the main loop sees EOF and exits

    def _watch(self) -> None:
        """Answer what the parent asked about queued jobs while this one runs; a pipe
        that cannot be read (or a frame that makes no sense) ends the watching: the
        main loop meets the same problem after the job."""
        watch = self.watch
        if watch is None:
            return
        try:
            frames = watch()
            if frames:
                with self.lock:
                    if self._pipe.write_intact():
                        self._pipe.write(frames)
        except (OSError, wire.ProtocolError):
            self.watch = None

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
            if current is None or not self._pipe.write_intact():
                return  # no job; or its handler closed the pipe: write nothing there
            job_id, context = current
            if job_id != self._seen_job:
                self._seen_job = job_id
                self._seen_seq = 0
            seq, progress = context.take_progress(self._seen_seq)
            self._seen_seq = seq
            try:
                data = wire.Heartbeat(job_id, progress).encode()
            except TypeError:
                # progress() refuses what JSON cannot hold; never let it stop the beat.
                data = wire.Heartbeat(job_id).encode()
            self._pipe.write(data)
