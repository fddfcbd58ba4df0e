"""The hot table given back its size once a held MVCC horizon has let go.

A held horizon keeps every row version written meanwhile in ``supervisor.jobs``: a
claim, a start and a completion per job, none of them removable until the hold ends
(issue 40: a 10-minute hold at 1,000 jobs/s grew the heap to about 410 MB and its
indexes to about 70 MB). Since finished jobs move to the archives
(``supervisor.db.archives``), the hot table holds only the jobs in flight and those that
ended in the last rounds: once vacuumed, nearly all of that space is empty. Giving it
back takes two steps, each chosen so that no claim waits long:

- **the heap, by vacuum**. Vacuum removes the hold's versions and then truncates the
  empty pages at the end of the file. The truncation never waits for its lock and gives
  it up as soon as another session asks for the table (PostgreSQL checks every 20 ms),
  so claims and inserts pause for at most that. The tail empties by itself a minute or
  two after the hold: new rows go to the free space vacuum found near the front, and
  the jobs at the end finish and move to their archive. Where autovacuum is on (for the
  server and the table), the leader leaves this to it and only looks; where it is off,
  the leader runs a plain ``VACUUM`` at each look. Its own ``VACUUM`` beside autovacuum
  was tried and dropped: at full speed (a manual vacuum has no cost delay) on the
  CPUs the children use, it made the recovery's first minute worse (pickup p99 86 ms)
  than the autovacuum alone did. Measured: a 4-minute hold's 167 MB heap came back to
  34 MB at autovacuum's second pass after the hold, with no pause to see.
- **the indexes, by ``VACUUM FULL``, once the heap is small again**. Vacuum frees index
  pages for reuse but never gives them back. The rewrite holds an ``ACCESS EXCLUSIVE``
  lock for as long as it reads the heap and builds the indexes of the few rows left: a
  few tens of milliseconds on a heap of the baseline's size, where the same rewrite of
  the swollen 480 MB heap paused every claim for 0.7 s.

When a step runs:

- only after a held horizon has let go (or once after start-up, for a hold an earlier
  supervisor saw): not while it is held (vacuum could remove nothing, and the rewrite
  would have to keep every version the holder may still see), and not in a steady run;
- only when the table with its indexes is swollen (``shared.hot_table``: at least 64 MB,
  and its live rows need less than an eighth of it);
- vacuum (or a look at autovacuum's work) while the heap alone is swollen, for
  ``VACUUM_LOOKS`` looks; a heap still swollen after them has a live row pinned near its
  end (a long job claimed late in the hold), and the rewrite reads it whole, if at most
  ``MAX_BYTES``. A larger one takes too long to read under the lock: the operator is
  told, and the leader goes on looking each minute, as vacuum may yet shrink it (a
  20-minute hold at 5,800 jobs/s leaves 4.4 GB of heap and 14 million versions, which
  autovacuum takes minutes to remove);
- each under a ``LOCK_TIMEOUT`` (never queued behind a reader, an open producer
  transaction or autovacuum, which is then doing the same work) and a statement timeout
  inside the background connection's deadline.

The leader asks for it in its background round (``HistoryWriter``), after the move of
finished jobs into their archives.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass

from shared.hot_table import swollen

log = logging.getLogger("supervisor.maintenance")

MAX_BYTES = 2 * 2**30  # the largest heap rewritten under the lock
CHECK_EVERY = 60.0  # seconds from the first round, or a failed rewrite, to the next look
VACUUM_EVERY = 30.0  # seconds between two looks while vacuum gives the heap back
VACUUM_LOOKS = 6  # looks after a hold before the heap is rewritten whatever its size
HELD_AFTER = 10.0  # seconds: an older snapshot or xid counts as a held horizon
LOCK_TIMEOUT_MS = 100
REWRITE_TIMEOUT_MS = 2000
VACUUM_TIMEOUT_MS = 20000  # plain vacuum locks out nobody: it may take its time

SIZE = """
SELECT pg_relation_size('supervisor.jobs'), pg_indexes_size('supervisor.jobs'),
       coalesce((SELECT n_live_tup FROM pg_stat_user_tables
                 WHERE relid = 'supervisor.jobs'::regclass), 0),
       current_setting('autovacuum')::boolean AND coalesce(
           (SELECT o.option_value::boolean
            FROM pg_class c, pg_options_to_table(c.reloptions) o
            WHERE c.oid = 'supervisor.jobs'::regclass
              AND o.option_name = 'autovacuum_enabled'), true)
"""


@dataclass(frozen=True)
class HotTableSize:
    """What a look at the hot table found (``SIZE``)."""

    heap: int  # bytes
    indexes: int  # bytes
    live: int  # rows, as the statistics last counted them
    autovacuum: bool  # autovacuum runs on it (the server's setting and the table's)


class Step(enum.Enum):
    """What a look at the hot table's size asks for."""

    VACUUM = "vacuum"  # plain: frees the hold's versions, truncates the empty tail
    REWRITE = "rewrite"  # VACUUM FULL: a fresh heap and fresh indexes

    @property
    def timeout_ms(self) -> int:
        """The step's statement timeout."""
        return VACUUM_TIMEOUT_MS if self is Step.VACUUM else REWRITE_TIMEOUT_MS

    def bounds(self) -> tuple[str, ...]:
        """The settings to send before the step (``UNBOUND`` after it)."""
        return (f"SET lock_timeout = '{LOCK_TIMEOUT_MS}ms'",
                f"SET statement_timeout = '{self.timeout_ms}ms'")

    def statement(self, server_version: int) -> str:
        """The step's ``VACUUM`` for a server of ``server_version`` (libpq's number).
        From PostgreSQL 18 a ``VACUUM`` of an inheritance parent processes every child
        unless told ``ONLY``: without it this would read (or rewrite, under their
        locks) every archive; before 18, ``ONLY`` is a syntax error there."""
        only = "ONLY " if server_version >= 180000 else ""
        full = "(FULL) " if self is Step.REWRITE else ""
        return f"VACUUM {full}{only}supervisor.jobs"


UNBOUND = ("RESET lock_timeout", "RESET statement_timeout")


@dataclass
class Compaction:
    """When to look at the hot table's size, and which step a look asks for."""

    next_look: float | None = None  # monotonic; None: a look CHECK_EVERY from the first
    held: bool = False  # the horizon was held at the last look at its holder
    armed: bool = True  # a hold was seen (or the supervisor started) since the last look
    vacuum_looks: int = 0  # looks at a swollen heap since the last hold let go
    rewrites: int = 0
    last_heap: int = 0  # bytes, at the last look
    last_indexes: int = 0
    last_step_seconds: float = 0.0
    too_big_told: bool = False

    def horizon_held(self, seconds: float) -> None:
        """The horizon's holder looked at: held ``seconds`` (0: not held)."""
        self.held = seconds > HELD_AFTER
        if self.held:
            self.armed = True
            self.vacuum_looks = 0
            self.too_big_told = False

    def due(self, now: float) -> bool:
        """Whether this round looks at the size. Not the first round: the horizon's
        holder has not been looked at yet, and a hold may predate the supervisor."""
        if self.next_look is None:
            self.next_look = now + CHECK_EVERY
        return self.armed and not self.held and now >= self.next_look

    def looked(self, now: float, size: HotTableSize) -> Step | None:
        """A look found the hot table at ``size``: the step to take now, if any."""
        self.last_heap, self.last_indexes = size.heap, size.indexes
        self.next_look = now + CHECK_EVERY
        if not swollen(size.heap + size.indexes, size.live):
            self.armed = False
            return None
        if not swollen(size.heap, size.live):
            return Step.REWRITE  # the indexes' turn: a short read of a small heap
        self.vacuum_looks += 1
        vacuum = None if size.autovacuum else Step.VACUUM
        if self.vacuum_looks <= VACUUM_LOOKS:
            self.next_look = now + VACUUM_EVERY
            return vacuum
        if size.heap <= MAX_BYTES:
            return Step.REWRITE  # vacuum cannot shrink it: whole, pause and all
        # Too large to read under the lock in time: vacuum may yet shrink it (a slow
        # pass over a hold's many versions, a long job at the end that will finish).
        if not self.too_big_told:
            self.too_big_told = True
            log.warning("supervisor.jobs takes %d MB for %d unfinished or just-finished jobs "
                        "and vacuum has not given the space back yet; too large to rewrite "
                        "under its lock here: run VACUUM FULL supervisor.jobs (VACUUM "
                        "(FULL) ONLY supervisor.jobs from PostgreSQL 18) in a quiet moment "
                        "if it stays so (docs/operations.md)",
                        size.heap // 2**20, size.live)
        return vacuum

    def vacuumed(self, seconds: float, error: str | None) -> None:
        """The plain vacuum answered after ``seconds``: done, or ``error`` (the next
        look decides again)."""
        self.last_step_seconds = seconds
        if error is None:
            log.debug("vacuumed supervisor.jobs after a held horizon (%d MB heap before) "
                      "in %.2f s", self.last_heap // 2**20, seconds)
        else:
            log.debug("did not vacuum supervisor.jobs this time: %s", error)

    def rewritten(self, seconds: float, error: str | None) -> None:
        """The rewrite answered after ``seconds``: done, or ``error``."""
        self.last_step_seconds = seconds
        if error is None:
            self.armed = False
            self.vacuum_looks = 0
            self.rewrites += 1
            log.info("rewrote supervisor.jobs after a held horizon (%d MB heap and %d MB of "
                     "indexes before) in %.2f s", self.last_heap // 2**20,
                     self.last_indexes // 2**20, seconds)
        else:
            log.info("left supervisor.jobs as it is (%d MB) for now: %s",
                     (self.last_heap + self.last_indexes) // 2**20, error)
