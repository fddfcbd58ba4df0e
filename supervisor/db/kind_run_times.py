"""Each kind's recent run times as the table has them, for a drain's stop notices: a
supervisor that has not yet completed a job of a kind itself (it just started, or the
kind is rare) would otherwise tell every running job of that kind it cannot finish, even
one a moment from its end (issue 47).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import psycopg

log = logging.getLogger("supervisor.db")

# The wall time of each kind's last 200 completions of the last day (through the index
# of finished rows), the 95th percentile of those, as RunTimes computes its own.
KIND_RUN_P95 = """
SELECT k.kind, percentile_disc(0.95) WITHIN GROUP (ORDER BY r.wall)
FROM unnest(%(kinds)s::text[]) AS k(kind)
CROSS JOIN LATERAL (
    SELECT (j.usage->>'wall_seconds')::float8 AS wall FROM supervisor.jobs j
    WHERE j.kind = k.kind AND j.state = 'completed' AND j.usage ? 'wall_seconds'
      AND j.finished_at > now() - interval '1 day'
    ORDER BY j.finished_at DESC
    LIMIT 200) AS r
GROUP BY k.kind
HAVING count(*) >= %(min_samples)s
"""

# The read holds the drain's start on the loop's connection, and its cost has no bound of
# its own: a kind with few completions among many of others' has its index walk read
# every job finished that day (at 1,000 jobs/s, 86 million entries). Past this budget
# the kinds stay unknown, as when the table has no completions of theirs.
KIND_RUN_TIMEOUT_MS = 250


def kind_run_p95(conn: psycopg.Connection, kinds: Sequence[str], min_samples: int,
                 timeout_ms: int = KIND_RUN_TIMEOUT_MS) -> dict[str, float]:
    """The 95th percentile of each of ``kinds``' recent run times, for those with at
    least ``min_samples`` completions measured; none when reading them took longer than
    ``timeout_ms``. ``conn`` is in autocommit (the read is a transaction of its own)."""
    if not kinds:
        return {}
    try:
        with conn.transaction():
            conn.execute(f"SET LOCAL statement_timeout = {int(timeout_ms)}")
            rows = conn.execute(KIND_RUN_P95,
                                {"kinds": list(kinds), "min_samples": min_samples}).fetchall()
    except psycopg.errors.QueryCanceled:
        log.info("the run times of %s took longer than %d ms to read: left unknown",
                 ", ".join(kinds), timeout_ms)
        return {}
    return {kind: float(p95) for kind, p95 in rows if p95 is not None}
