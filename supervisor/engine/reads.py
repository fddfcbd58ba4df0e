"""What the table says about this supervisor's run, for the arbiter's reports.

Each read is one statement on the work connection, through ``Database.call``: None
when the database does not answer, never an exception.
"""

from __future__ import annotations

from supervisor.db import (
    Database,
    RunFailures,
    Waiting,
    cancelled_dependents,
    run_failures,
    waiting,
)


class RunReads:
    """Reads of the served queues and of this supervisor's finished jobs."""

    def __init__(self, db: Database, owner: str, queues: list[str]) -> None:
        self.db = db
        self.owner = owner
        self.queues = queues

    def run_failures(self, window: float) -> RunFailures | None:
        """What this supervisor's jobs that ended in the last ``window`` seconds were
        discarded or cancelled for, from the table (None: it did not answer)."""
        return self.db.call(lambda s: run_failures(s.connection, self.owner, window), None,
                            "reading what the burst discarded")

    def cancelled_dependents(self, window: float) -> int | None:
        """Dependents that this supervisor's discards of the last ``window`` seconds
        cancelled (None: the table did not answer)."""
        return self.db.call(lambda s: cancelled_dependents(s.connection, self.owner, window),
                            None, "counting cancelled dependents")

    def waiting(self) -> Waiting | None:
        """What waits in the served queues, for a run_at or for dependencies (None: the
        table did not answer)."""
        return self.db.call(lambda s: waiting(s.connection, self.queues), None,
                            "reading what waits")

    def queue_counts(self) -> dict | None:
        """Per-queue counts of live jobs (None while the database is away)."""
        return self.db.call(lambda s: s.queue_counts(self.queues), None, "counting jobs")
