"""The finished jobs' counts per queue, shared by every request of one dashboard
process and counted again at most every ``FINISHED_EVERY`` seconds.

Why: finished jobs are most of the table (kept for the retention), and counting them
reads the whole finished part of the state index, a few hundred milliseconds on a
million rows. The jobs in flight, which an operator watches, are counted at every
request; the finished ones are served from here, recounted in the background when
older than ``FINISHED_EVERY`` (the request that notices does not wait), so any number
of open tabs costs that count once per period. Only the very first request waits for
it, and the first after an action that changed finished jobs (``expire``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from supervisor import admin

log = logging.getLogger("supervisor.dashboard")

FINISHED_EVERY = 30.0  # seconds


class FinishedCounts:
    """``{queue: {state: n}}`` for completed, discarded and cancelled jobs, with the
    time it was counted."""

    def __init__(self, every: float = FINISHED_EVERY) -> None:
        self.every = every
        self._value: dict[str, dict[str, int]] | None = None
        self._counted_at = 0.0  # time.monotonic()
        self._task: asyncio.Task[Any] | None = None
        self._expired = False

    async def get(self, db: Any) -> tuple[dict[str, dict[str, int]], float]:
        """The counts and their age in seconds; counts now only the first time and
        after ``expire``."""
        if self._value is None or self._expired:
            await self._count(db)
        elif (time.monotonic() - self._counted_at > self.every
              and (self._task is None or self._task.done())):
            self._task = asyncio.create_task(self._count_quietly(db))
        assert self._value is not None
        return self._value, time.monotonic() - self._counted_at

    def expire(self) -> None:
        """Count again, and wait for it, at the next request: an action just changed
        finished jobs and the page it returns to should show it."""
        self._expired = True

    async def _count(self, db: Any) -> None:
        value = await db.run(admin.finished_counts)
        self._value, self._counted_at, self._expired = value, time.monotonic(), False

    async def _count_quietly(self, db: Any) -> None:
        try:
            await self._count(db)
        except Exception as exc:  # the next request reports the database itself
            log.debug("recounting finished jobs failed: %s", exc)
