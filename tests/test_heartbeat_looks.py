"""The child's heartbeat thread looks at a long job less often as it ages (issue 31):
every look takes the GIL from the handler, so a job that has run a while is looked at
every tenth of its age, at most every ``MAX_LOOK`` seconds, and a job that begins
during such a long look wakes the thread. A stream of short jobs wakes it once per
``FIRST_LOOK``, not once per ``TITLE_LAG``: each wake is what costs the child."""

from __future__ import annotations

import itertools
import os
import time

from workers.context import JobContext
from workers.heartbeat import FIRST_LOOK, TITLE_LAG, Heartbeat
from workers.jobpipe import JobPipe


def _heartbeat() -> tuple[Heartbeat, list[tuple[float, int]]]:
    read_fd, write_fd = os.pipe()
    beat = Heartbeat(JobPipe(read_fd, write_fd), interval=3600.0)
    looks: list[tuple[float, int]] = []

    def listen() -> None:
        current = beat.current
        looks.append((time.monotonic(), current[0] if current else 0))

    beat.listen = listen
    beat.start()
    return beat, looks


def _context(job_id: int) -> JobContext:
    return JobContext(job_id, "k", "default", 1, {})


def test_a_long_job_is_looked_at_less_often_as_it_ages():
    beat, looks = _heartbeat()
    beat.begin(1, _context(1))
    time.sleep(2.0)
    with beat.lock:
        beat.end()
    # Every TITLE_LAG (20 ms) would be about 100 looks in 2 s; every tenth of the job's
    # age from 0.2 s on is about 35.
    assert 10 <= len(looks) <= 60, len(looks)
    gaps = sorted(b - a for (a, _), (b, _) in itertools.pairwise(looks))
    young, old = gaps[len(gaps) // 4], gaps[-3]
    # Looked at every TITLE_LAG while young, several times less often once old (ratios,
    # not times: a loaded machine wakes the thread late, but late alike).
    assert old > 3 * young, (young, old)
    assert old > 2 * TITLE_LAG


def test_a_job_that_begins_during_a_long_look_wakes_the_thread():
    """The thread waits out a long look on the wake event; ``begin`` sets it, so the next
    job's title and notices are not late by the old job's look."""
    read_fd, write_fd = os.pipe()
    beat = Heartbeat(JobPipe(read_fd, write_fd), interval=3600.0)
    beat.begin(1, _context(1))
    assert not beat._wake.is_set()  # a stream of short jobs costs no thread switch each
    beat._long_look = True  # as the thread sets it while it waits out a long look
    beat.begin(2, _context(2))
    assert beat._wake.is_set()


def test_a_stream_of_short_jobs_wakes_the_thread_once_per_first_look():
    beat, looks = _heartbeat()
    start = time.monotonic()
    job_id = 0
    while time.monotonic() - start < 1.0:  # jobs of 10 ms, one after another
        job_id += 1
        beat.begin(job_id, _context(job_id))
        time.sleep(0.01)
        with beat.lock:
            beat.end()
    span = time.monotonic() - start
    # Every TITLE_LAG (20 ms) would be about 50 looks; once per FIRST_LOOK about 20. A
    # loaded machine wakes the thread late, which only lowers the count.
    assert FIRST_LOOK >= 2 * TITLE_LAG
    assert len(looks) <= 1.3 * span / FIRST_LOOK, len(looks)
    assert job_id >= 30  # the jobs were short against FIRST_LOOK


def test_a_job_that_lasts_is_looked_at_every_title_lag_after_its_first_look():
    beat, looks = _heartbeat()
    beat.begin(1, _context(1))
    time.sleep(0.35)
    with beat.lock:
        beat.end()
    gaps = [b - a for (a, _), (b, _) in itertools.pairwise(looks)]
    assert looks and all(job == 1 for _, job in looks)
    # Seen at a wake, looked at FIRST_LOOK later, then every TITLE_LAG while young.
    assert len([g for g in gaps if g < FIRST_LOOK * 0.8]) >= 3, gaps
