"""Stop notices (issue 28): which running jobs are told they are about to be stopped.

A drain gives running jobs its grace to finish. A job its kind's measured 95th percentile
run time (``RunTimes``) says cannot finish within what is left of the grace, one already
past that run time, and one whose kind has no measured run time yet are told (at the
drain's start, and at each turn of the drain for jobs that start late or overrun), so
its handler can checkpoint and hand the job back (``workers.Stopping``): it goes back
without spending its attempt, without an errors entry, and resumes from its checkpoint
on the next supervisor. A job expected to finish
is left alone; if it is still running at the end of the grace it is killed as before
(``shutdown``).

A queue paused with ``--stop-running`` tells its running jobs and kills each the pool's
``kill_grace`` later unless it answered first; either way the job goes back without
spending its attempt (a ``stopped`` answer as after a drain's notice, a kill as a drain's
``shutdown``) and waits, available, for ``queues resume``.

A fence (leases unrenewed too long) tells every running job and kills it ``FENCE_GRACE``
later unless it answered first: the fence margin leaves a second for the kill.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from shared import jobs
from supervisor.pool import RunTimes

if TYPE_CHECKING:
    from supervisor.pool import Pool

log = logging.getLogger("supervisor.engine")

FENCE_GRACE = 0.5  # seconds between a fence's notice and its kill


def notify_drain(pool: Pool, run_times: RunTimes, grace: float) -> int:
    """Tell each running job that cannot finish within ``grace`` seconds; returns how
    many were told."""
    told = 0
    for job, elapsed in pool.running_since():
        expected = run_times.p95(job.kind)
        if expected is not None and elapsed < expected and expected - elapsed <= grace:
            continue  # expected to finish within the grace: left to finish
        if pool.notify(job.id, "drain", jobs.FAIL_STOPPED, "stopped for a drain", None):
            told += 1
    if told:
        log.info("drain: %d running jobs cannot finish within the %.1f s left of the grace; "
                 "told to checkpoint and stop", told, grace)
    return told


def _notify_running(pool: Pool, reason: str, message: str, grace: float,
                    queues: set[str] | None = None) -> int:
    """Tell every running job (of ``queues``, None: of any queue) that it stops now,
    failing as ``FAIL_STOPPED`` with ``message`` (``{queue}`` becomes the job's queue)
    if it is killed ``grace`` seconds later. Returns how many were told."""
    told = 0
    for job, _ in pool.running_since():
        if queues is not None and job.queue not in queues:
            continue
        if pool.notify(job.id, reason, jobs.FAIL_STOPPED, message.format(queue=job.queue),
                       grace):
            told += 1
    return told


def notify_fence(pool: Pool) -> int:
    """Tell every running job that it stops now (a fence); each is killed
    ``FENCE_GRACE`` later unless it answered first. Returns how many were told."""
    return _notify_running(pool, "fence", "interrupted (shutdown): fenced", FENCE_GRACE)


def notify_pause(pool: Pool, queues: set[str], kill_grace: float) -> int:
    """Tell every running job of ``queues`` (paused with ``--stop-running``) that it
    stops now; each is killed ``kill_grace`` later unless it answered first. Returns how
    many were told (a job told already, by this pause or anything else, is not again)."""
    told = _notify_running(
        pool, "pause", "interrupted (shutdown): queue {queue} paused with --stop-running",
        kill_grace, queues)
    if told:
        log.info("queues %s paused with --stop-running: %d running jobs told to checkpoint "
                 "and stop", ", ".join(sorted(queues)), told)
    return told
