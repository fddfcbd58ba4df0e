"""What each kind of job costs, over recent finished jobs: ``supervisor status --kinds``.

Read from the ``usage`` of the newest finished jobs (completed or discarded, the newest
``RECENT_LIMIT`` of the last ``RECENT_WINDOW`` seconds) through the partial index on
finished rows, so its cost is bounded by the limit, not by the table. Jobs without a
usage (the parent ended their last attempt: timeout, hung, crash; or older rows) count
toward ``jobs`` and the failure rate but not toward the percentiles.
"""

from __future__ import annotations

from typing import Any

import psycopg

from shared.usage_sql import usage_number

RECENT_WINDOW = 3600.0  # seconds of finished jobs looked at
RECENT_LIMIT = 10_000  # newest finished jobs looked at, at most

_KIND_USAGE = f"""
WITH recent AS (
    SELECT kind, state, usage FROM supervisor.jobs
    WHERE state IN ('completed', 'discarded')
      AND finished_at > now() - %(window)s * interval '1 second'
    ORDER BY finished_at DESC
    LIMIT %(limit)s)
SELECT kind, count(*) AS jobs,
       count(*) FILTER (WHERE state = 'discarded')::float8 / count(*) AS failure_rate,
       percentile_cont(ARRAY[0.5, 0.95]) WITHIN GROUP (
           ORDER BY {usage_number("wall_seconds")}) AS wall,
       percentile_cont(ARRAY[0.5, 0.95]) WITHIN GROUP (
           ORDER BY {usage_number("cpu_seconds")}) AS cpu,
       percentile_cont(ARRAY[0.5, 0.95]) WITHIN GROUP (
           ORDER BY {usage_number("max_rss_bytes")}) AS rss
FROM recent
GROUP BY kind
ORDER BY kind
"""


def kind_usage(conn: psycopg.Connection, window: float = RECENT_WINDOW,
               limit: int = RECENT_LIMIT) -> list[dict[str, Any]]:
    """Per kind over recent finished jobs: ``kind``, ``jobs``, ``failure_rate``
    (discarded share), and ``wall_seconds``, ``cpu_seconds``, ``max_rss_bytes`` each as
    ``{"p50", "p95"}`` (None when no job of the kind has a usage)."""
    out = []
    for kind, jobs, failure_rate, wall, cpu, rss in conn.execute(
            _KIND_USAGE, {"window": window, "limit": limit}):
        out.append({"kind": kind, "jobs": jobs, "failure_rate": failure_rate,
                    "wall_seconds": percentile_pair(wall), "cpu_seconds": percentile_pair(cpu),
                    "max_rss_bytes": percentile_pair(rss, whole=True)})
    return out


def percentile_pair(values: list[float] | None, whole: bool = False) -> dict[str, Any] | None:
    """``[p50, p95]`` from ``percentile_cont`` as ``{"p50", "p95"}`` (rounded to whole
    numbers with ``whole``), None when no row had the figure."""
    # percentile_cont over only NULLs answers NULL percentiles.
    if not values or values[0] is None:
        return None
    p50, p95 = (float(v) for v in values)
    if whole:
        return {"p50": round(p50), "p95": round(p95)}
    return {"p50": p50, "p95": p95}
