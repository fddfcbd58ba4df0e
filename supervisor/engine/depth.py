"""How many jobs to hold per child when a queue's prefetch is "auto" (the default).

A child must never wait for the database between two jobs, and no job should be held
longer than that needs. So each queue holds, per allotted child, about two claim round
trips of its own work plus the job in hand: ``ceil(2 * claim_latency / run_time) + 1``.
Both are measured as this supervisor runs (smoothed averages): no-op jobs end up with
about a hundred per child, 5 ms jobs with a few, long jobs with one. Until a queue's
first jobs have finished its run time is unknown and it holds one per child, which is
what a long-job queue wants from its first claim on.
"""

from __future__ import annotations

import math

MAX_DEPTH = 256  # per child; also bounds what a dying supervisor leaves leased
SMOOTHING = 0.2  # weight of the newest sample in each average
FIRST_LATENCY = 0.005  # seconds, assumed for the claim until one was measured


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
