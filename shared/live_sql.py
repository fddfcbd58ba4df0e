"""Reading the jobs in flight at what they cost, not at what the table holds.

``supervisor.jobs`` keeps finished jobs for the retention (a week by default: at 1,000
jobs/s, six hundred million rows), beside the few thousand in flight. The schema reaches
the unfinished ones through partial indexes, one per group of states
(``jobs_available_idx``, ``jobs_due_idx``, ``jobs_lease_idx``), and PostgreSQL uses a
partial index only where the query's condition implies its predicate: a ``state IN
('available', 'running')`` implies neither ``state = 'available'`` nor ``state =
'running'``, so it read the whole table. The burst's progress line did that every half
second on a terminal, and the leader's per-minute depth sample ran past its budget on
every minute once the history was big (docs/reliability.md, issue 40).

``live_jobs`` writes such a read as one ``UNION ALL`` arm per index, each arm's
condition its index's predicate.
"""

from __future__ import annotations

from collections.abc import Sequence

# Each group of unfinished states, as the predicate of the partial index that holds it.
LIVE_ARMS = {
    "available": "state = 'available'",  # jobs_available_idx
    "waiting": "state IN ('scheduled', 'retryable')",  # jobs_due_idx
    "running": "state = 'running'",  # jobs_lease_idx
}
EVERY_ARM = ("available", "waiting", "running")


def live_jobs(columns: str, arms: Sequence[str] = EVERY_ARM, where: str = "") -> str:
    """``SELECT columns FROM ONLY supervisor.jobs`` (the hot table: issue 40's archives
    hold finished jobs only) over the unfinished jobs of ``arms`` (keys
    of ``LIVE_ARMS``), one ``UNION ALL`` arm each; ``where``: a condition every arm adds.
    Meant as a subquery: ``FROM ({live_jobs(...)}) AS live``."""
    extra = f" AND {where}" if where else ""
    return "\n    UNION ALL\n    ".join(
        f"SELECT {columns} FROM ONLY supervisor.jobs WHERE {LIVE_ARMS[arm]}{extra}"
        for arm in arms)
