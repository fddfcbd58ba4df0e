"""The finished jobs' counts per queue, shared by every request of one dashboard
process and counted again at most every ``FINISHED_EVERY`` seconds.

Why: finished jobs are most of the table (kept for the retention), and counting them
reads the whole finished part of the state index, a few hundred milliseconds on a
million rows. The jobs in flight, which an operator watches, are counted at every
request; the finished ones are served from here, recounted in the background when
older than ``FINISHED_EVERY`` (the request that notices does not wait), so any number
of open tabs costs that count once per period. Only the very first request waits for
it, and the first after an action that changed finished jobs (``expire``).

Each count has a budget (``FINISHED_BUDGET``): on a table of hundreds of millions of
finished jobs it would hold one of the pool's connections and a backend's CPU without
end. Past it the last count is kept (its age shown on the page); before any count
succeeded, the pages say the finished jobs were not counted. And a count that took long
rests ten times its length before the next (``admin.FINISHED_COUNT_SHARE``): one that
ran out of its budget is tried every 100 s, so counting takes at most a tenth of a
backend.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from supervisor import admin

log = logging.getLogger("supervisor.dashboard")

FINISHED_EVERY = 30.0  # seconds
FINISHED_BUDGET = 10.0  # seconds a count may take


class FinishedCounts:
    """The finished jobs by queue and state (an ``admin.FinishedTally``), with the time
    it was counted."""

    def __init__(self, every: float = FINISHED_EVERY, budget: float = FINISHED_BUDGET) -> None:
        self.every = every
        self.budget = budget
        self._value: admin.FinishedTally | None = None
        self._counted_at = 0.0  # time.monotonic() of the count in _value
        self._tried_at = 0.0  # of the last count begun, in budget or not
        self._took = 0.0  # its seconds
        self._task: asyncio.Task[Any] | None = None
        self._expired = False

    async def get(self, db: Any) -> tuple[admin.FinishedTally, float]:
        """The counts and their age in seconds; counts now only the first time and
        after ``expire``, in the background when the last try is ``every`` old (and ten
        times as old as it took)."""
        if self._value is None or self._expired:
            await self._count(db)
        elif (time.monotonic() - self._tried_at > self._rest()
              and (self._task is None or self._task.done())):
            self._task = asyncio.create_task(self._count_quietly(db))
        assert self._value is not None
        return self._value, time.monotonic() - self._counted_at

    def _rest(self) -> float:
        # Seconds from one try to the next: every, or ten times what the last one took.
        return max(self.every, self._took / admin.FINISHED_COUNT_SHARE)

    def expire(self) -> None:
        """Count again, and wait for it, at the next request: an action just changed
        finished jobs and the page it returns to should show it."""
        self._expired = True

    async def _count(self, db: Any) -> None:
        self._tried_at = time.monotonic()
        value = await db.run(admin.finished_counts, self.budget)
        self._took, self._expired = time.monotonic() - self._tried_at, False
        if not value.counted and self._value is not None and self._value.counted:
            # Out of budget: the last count stays, shown with its true age.
            log.info("recounting finished jobs took over %g s (about %s rows); the "
                     "count of %.0f s ago stays", self.budget, value.estimated_rows,
                     time.monotonic() - self._counted_at)
            return
        self._value, self._counted_at = value, time.monotonic()

    async def _count_quietly(self, db: Any) -> None:
        try:
            await self._count(db)
        except Exception as exc:  # the next request reports the database itself
            log.debug("recounting finished jobs failed: %s", exc)
