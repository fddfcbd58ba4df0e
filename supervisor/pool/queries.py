"""What the parent loop asks the pool, read-only: counts, the jobs in flight, the
outcomes so far and when ``tick`` is due. A base of ``Pool``, kept apart so the policy
module holds only decisions."""

from __future__ import annotations

from collections import Counter, deque

from shared import jobs
from supervisor.pool.process import ChildProcess


class PoolQueries:
    """The pool's answers to the parent loop; the state is ``Pool``'s."""

    _children: dict[int, ChildProcess]
    _idle: deque[ChildProcess]
    _in_flight: dict[int, ChildProcess]
    _outcomes: list
    _target: int
    _halted: str | None
    _due: float | None

    @property
    def halted(self) -> str | None:
        """Why the pool stopped forking (a crash loop), or None."""
        return self._halted

    def size(self) -> int:
        """The current target number of children."""
        return self._target

    def alive(self) -> int:
        """Children not reaped yet (the parent's drain waits for 0)."""
        return len(self._children)

    def idle_count(self) -> int:
        """Children ready for a job now."""
        return len(self._idle)

    def busy_count(self) -> int:
        """Children holding jobs (running one, with or without more queued)."""
        return sum(1 for child in self._children.values() if child.jobs)

    def occupied(self) -> Counter[str]:
        """Children per queue whose pipe holds its jobs (a child runs one queue at a
        time): how many run each queue here, counting those whose START is still on
        its way back."""
        return Counter(child.jobs[0].queue for child in self._children.values()
                       if child.jobs)

    def held_count(self) -> int:
        """Jobs in children: running, or queued behind a running one."""
        return len(self._in_flight)

    def running(self) -> list[jobs.ClaimedJob]:
        """Every job held in a child now, running or queued (for lease renewal and
        reconciliation: all of them are leased by this supervisor)."""
        return [job for child in self._children.values() for job in child.jobs]

    def take_outcomes(self) -> list:
        """Every JobDone, JobFailed, JobProgress and ChildEvent since the last call."""
        outcomes = self._outcomes
        if outcomes:
            self._outcomes = []
        return outcomes

    def next_deadline(self) -> float | None:
        """Monotonic time by which ``tick`` must run: the next boot, heartbeat, job or
        kill deadline (possibly a little early, never late)."""
        return self._due
