"""How many jobs to hold per child when a queue's prefetch is "auto" (the default).

A child must never wait for the database between two jobs, and no job should be held
longer than that needs. So each queue holds, per allotted child, about two claim round
trips of its own work plus the job in hand: ``ceil(2 * claim_latency / run_time) + 1``.
Both are measured as this supervisor runs (smoothed averages): no-op jobs end up with
about a hundred per child, 5 ms jobs with a few, long jobs with one. Until a queue's
first jobs have finished its run time is unknown and it holds one per child, which is
what a long-job queue wants from its first claim on.

Of what a queue holds, some waits in each child's own pipe (``pipeline``): about one
claim round trip of work behind the running job, so the child runs back to back while
the parent turns its loop, and never more than the claim depth. A job of ``LONG_JOB``
or more gets a child to itself: it never waits behind another while a child is idle,
and what the pipe would save it (a loop turn, under a millisecond) is nothing to it.
"""

from __future__ import annotations

import math

MAX_DEPTH = 256  # per child; also bounds what a dying supervisor leaves leased
SMOOTHING = 0.2  # weight of the newest sample in each average
FIRST_LATENCY = 0.005  # seconds, assumed for the claim until one was measured
MAX_PIPELINE = 64  # jobs in one child's pipe: the running one and those queued behind
LONG_JOB = 0.1  # seconds: jobs this long run one per child


class PrefetchDepth:
    """Measured run times per queue and claim latency, and the depth they call for."""

    def __init__(self) -> None:
        self.run_time: dict[str, float] = {}
        self.latency = FIRST_LATENCY

    def ran(self, queue: str, seconds: float) -> None:
        """A job of ``queue`` ran ``seconds`` in its child."""
        old = self.run_time.get(queue)
        self.run_time[queue] = seconds if old is None else old + SMOOTHING * (seconds - old)

    def claimed(self, seconds: float) -> None:
        """A claim took ``seconds`` from sending to its answer."""
        self.latency += SMOOTHING * (seconds - self.latency)

    def depth(self, queue: str, configured: int | None) -> int:
        """Jobs to hold per allotted child: ``configured`` when the queue sets one."""
        if configured is not None:
            return configured
        run_time = self.run_time.get(queue)
        if run_time is None:
            return 1
        return min(MAX_DEPTH, math.ceil(2 * self.latency / max(run_time, 1e-6)) + 1)

    def pipeline(self, queue: str, configured: int | None) -> int:
        """Jobs of ``queue`` one child may hold in its pipe, the running one included:
        ``configured`` when the queue sets a prefetch, one for long jobs (and until a
        run time was measured), else about one claim round trip of work plus one."""
        if configured is not None:
            return max(1, configured)
        run_time = self.run_time.get(queue)
        if run_time is None or run_time >= LONG_JOB:
            return 1
        return min(MAX_PIPELINE, math.ceil(self.latency / max(run_time, 1e-6)) + 1)
