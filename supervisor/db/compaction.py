"""The hot table rewritten once a held horizon has let go and left it mostly empty.

A held MVCC horizon keeps every row version written meanwhile in ``supervisor.jobs``:
a claim, a start and a completion per job, none of them removable until the hold ends.
After it, vacuum frees the space and later rows reuse it, but the file keeps its
largest size (issue 40: a 10-minute hold at 1,000 jobs/s, about 600 MB). Since finished
jobs move to the archives (``supervisor.db.archives``), the hot table holds only the
jobs in flight and those that ended in the last rounds, so a rewrite (``VACUUM FULL``)
reads the file once and writes a few megabytes. It holds an ``ACCESS EXCLUSIVE`` lock
while it runs: no claim, insert or completion goes through meanwhile. So it runs only
when it is worth it, and bounded:

- only after a held horizon has let go (or once after start-up, for a hold an earlier
  supervisor saw): not while it is held (the rewrite would have to keep every version
  the holder may still see, and it would wait for the holder's lock), and not in a
  steady run, whose dead versions vacuum keeps reusing;
- only when the heap is swollen (``shared.hot_table``: at least 64 MB, and its live
  rows need less than an eighth of it) and at most ``MAX_BYTES`` (a larger file takes
  too long to read under the lock; the operator is told);
- a look that finds the table not worth it disarms the rewrite until the next hold; a
  rewrite that failed (its lock not had in time) is tried again ``CHECK_EVERY`` later;
- under a ``LOCK_TIMEOUT`` (never queued behind a reader, an open producer transaction
  or a running vacuum for longer) and a ``STATEMENT_TIMEOUT`` inside the background
  connection's deadline.

The leader asks for it in its background round (``HistoryWriter``), after the move of
finished jobs into their archives.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from shared.hot_table import swollen

log = logging.getLogger("supervisor.maintenance")

MAX_BYTES = 2 * 2**30
CHECK_EVERY = 60.0  # seconds from the first round, or a failed rewrite, to the next look
HELD_AFTER = 10.0  # seconds: an older snapshot or xid counts as a held horizon
LOCK_TIMEOUT_MS = 100
STATEMENT_TIMEOUT_MS = 2000

SIZE = """
SELECT pg_relation_size('supervisor.jobs'),
       coalesce((SELECT n_live_tup FROM pg_stat_user_tables
                 WHERE relid = 'supervisor.jobs'::regclass), 0)
"""
BOUND = (f"SET lock_timeout = '{LOCK_TIMEOUT_MS}ms'",
         f"SET statement_timeout = '{STATEMENT_TIMEOUT_MS}ms'")
REWRITE = "VACUUM (FULL) supervisor.jobs"
UNBOUND = ("RESET lock_timeout", "RESET statement_timeout")


@dataclass
class Compaction:
    """When to look at the hot table's size, and whether a look says to rewrite it."""

    next_look: float | None = None  # monotonic; None: a look CHECK_EVERY from the first
    held: bool = False  # the horizon was held at the last look at its holder
    armed: bool = True  # a hold was seen (or the supervisor started) since the last look
    rewrites: int = 0
    last_heap: int = 0  # bytes, at the last look
    last_rewrite_seconds: float = 0.0
    too_big_told: bool = False

    def horizon_held(self, seconds: float) -> None:
        """The horizon's holder looked at: held ``seconds`` (0: not held)."""
        self.held = seconds > HELD_AFTER
        if self.held:
            self.armed = True

    def due(self, now: float) -> bool:
        """Whether this round looks at the size. Not the first round: the horizon's
        holder has not been looked at yet, and a hold may predate the supervisor."""
        if self.next_look is None:
            self.next_look = now + CHECK_EVERY
        return self.armed and not self.held and now >= self.next_look

    def looked(self, now: float, heap: int, live: int) -> bool:
        """A look found ``heap`` bytes and about ``live`` rows: whether to rewrite now."""
        self.last_heap = heap
        worth = swollen(heap, live)
        if worth and heap > MAX_BYTES:
            if not self.too_big_told:
                self.too_big_told = True
                log.warning("supervisor.jobs takes %d MB for %d unfinished or just-finished "
                            "jobs, too large to rewrite under its lock here; run VACUUM FULL "
                            "supervisor.jobs in a quiet moment (docs/operations.md)",
                            heap // 2**20, live)
            worth = False
        self.armed = worth
        self.next_look = now + CHECK_EVERY
        return worth

    def rewritten(self, seconds: float, error: str | None) -> None:
        """The rewrite answered after ``seconds``: done, or ``error``."""
        self.last_rewrite_seconds = seconds
        if error is None:
            self.armed = False
            self.rewrites += 1
            log.info("rewrote supervisor.jobs after a held horizon (%d MB before) in %.2f s",
                     self.last_heap // 2**20, seconds)
        else:
            log.info("left supervisor.jobs as it is (%d MB) for now: %s",
                     self.last_heap // 2**20, error)
