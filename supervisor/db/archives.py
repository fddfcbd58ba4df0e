"""Finished jobs out of the hot table: the leader's move into archives, and their drop.

Schema 0032 (``shared/schema/0032_finished_archives.sql``) holds the mechanism: tables
that inherit from ``supervisor.jobs`` take its finished rows, one family per retention
('done': completed and cancelled; 'failed': discarded and expired), and a closed archive
is dropped whole once its retention has passed. This module says how much to move and
when an archive rotates, and reads what a round did. The statements run on the
leader's background connection (``HistoryWriter``), never on the loop's: at a high
rate a round moves tens of thousands of rows.

A family whose retention is under ``MIN_RETENTION`` is not archived: its jobs stay in
the hot table and go by the row-by-row prune, as before. There are few of them (an hour
of finished jobs at most), and an archive rotated every few minutes would cost more in
DDL than it saved.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MIN_RETENTION = 3600.0
"""Seconds: a family kept for less stays in the hot table (module docstring)."""
SPANS_PER_RETENTION = 8
"""An archive stays open an eighth of its family's retention: about nine per family."""
FIRST_ROWS = 10_000
"""Rows per family a round may move at first; ``ArchivePlan.answered`` adapts it."""
MAX_ROWS = 200_000
MIN_ROWS = 1_000
ROUND_TARGET = 0.5
"""Seconds a round's move should take: well inside the background statement's
deadline (3 s by default), so a bigger backlog grows the batch, not the risk."""

SETTLE = 10.0
"""Seconds from an archive's creation to its first row (schema 0032: a reader planned
before it existed must not meet a row moved into it)."""

ARCHIVE = ("SELECT family, moved, archive FROM supervisor.archive_finished("
           "%(done_span)s, %(failed_span)s, %(rows)s, %(settle)s)")
RETIRE = ("SELECT dropped, left_busy FROM supervisor.retire_job_archives("
          "%(done_retention)s, %(failed_retention)s)")


def span_for(retention: float) -> float | None:
    """How long a family's open archive takes rows (None: the family is not archived)."""
    if retention < MIN_RETENTION:
        return None
    return retention / SPANS_PER_RETENTION


@dataclass
class ArchiveRound:
    """What one round of the move and the drop did (for the debug log and the tests)."""

    moved: dict[str, int] = field(default_factory=dict)  # family -> rows moved
    dropped: int = 0  # archives dropped
    left_busy: int = 0  # archives due but locked by another session, left for later
    seconds: float = 0.0  # the move's time, request to answer


@dataclass
class ArchivePlan:
    """The leader's archive chore: the families' retentions and the size of a round's
    move, grown while a round moves a full batch quickly and shrunk when one is slow."""

    done_retention: float
    failed_retention: float
    rows: int = FIRST_ROWS

    @property
    def active(self) -> bool:
        """Whether either family is archived."""
        return (span_for(self.done_retention) is not None
                or span_for(self.failed_retention) is not None)

    def archive_params(self) -> dict[str, Any]:
        """The move's parameters."""
        return {"done_span": span_for(self.done_retention),
                "failed_span": span_for(self.failed_retention), "rows": self.rows,
                "settle": SETTLE}

    def retire_params(self) -> dict[str, Any]:
        """The drop's parameters."""
        return {"done_retention": self.done_retention,
                "failed_retention": self.failed_retention}

    def answered(self, moved: dict[str, int], seconds: float) -> None:
        """A move answered: a full batch in under half the target doubles the next one,
        a move over twice the target halves it."""
        if seconds > 2 * ROUND_TARGET:
            self.rows = max(MIN_ROWS, self.rows // 2)
        elif moved and max(moved.values()) >= self.rows and seconds < ROUND_TARGET / 2:
            self.rows = min(MAX_ROWS, self.rows * 2)

    def cancelled(self) -> None:
        """A move ran into the statement timeout: the next one is half as big."""
        self.rows = max(MIN_ROWS, self.rows // 2)
