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

from shared.costs import key_costs
from shared.usage_sql import in_range, usage_figure, usage_number

RECENT_WINDOW = 3600.0  # seconds of finished jobs looked at
RECENT_LIMIT = 10_000  # newest finished jobs looked at, at most

_KIND_USAGE = """
WITH recent AS (
    SELECT kind, state, usage FROM supervisor.jobs
    WHERE state IN ('completed', 'discarded')
      AND finished_at > now() - %(window)s * interval '1 second'
      AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
    ORDER BY finished_at DESC
    LIMIT %(limit)s),
figures AS (SELECT kind, state, {wall} AS wall, {cpu} AS cpu, {rss} AS rss FROM recent)
SELECT kind, count(*) AS jobs,
       count(*) FILTER (WHERE state = 'discarded')::float8 / count(*) AS failure_rate,
       percentile_cont(ARRAY[0.5, 0.95]) WITHIN GROUP (ORDER BY wall)
           FILTER (WHERE {wall_ok}) AS wall,
       percentile_cont(ARRAY[0.5, 0.95]) WITHIN GROUP (ORDER BY cpu)
           FILTER (WHERE {cpu_ok}) AS cpu,
       percentile_cont(ARRAY[0.5, 0.95]) WITHIN GROUP (ORDER BY rss)
           FILTER (WHERE {rss_ok}) AS rss
FROM figures
GROUP BY kind
ORDER BY kind
"""
_CHECKS = {"wall_ok": in_range("wall"), "cpu_ok": in_range("cpu"), "rss_ok": in_range("rss")}
# The plain cast (cheap), and the careful reading for when a hand-written usage fails it
# (2.5 us a figure a row more: on 10,000 jobs, 75 ms a page).
_KIND_USAGE_PLAIN = _KIND_USAGE.format(
    wall=usage_figure("wall_seconds"), cpu=usage_figure("cpu_seconds"),
    rss=usage_figure("max_rss_bytes"), **_CHECKS)
_KIND_USAGE_GUARDED = _KIND_USAGE.format(
    wall=usage_number("wall_seconds"), cpu=usage_number("cpu_seconds"),
    rss=usage_number("max_rss_bytes"), **_CHECKS)


def kind_usage(conn: psycopg.Connection, window: float = RECENT_WINDOW,
               limit: int = RECENT_LIMIT, kind: str | None = None) -> list[dict[str, Any]]:
    """Per kind over recent finished jobs: ``kind``, ``jobs``, ``failure_rate``
    (discarded share), and ``wall_seconds``, ``cpu_seconds``, ``max_rss_bytes`` each as
    ``{"p50", "p95"}`` (None when no job of the kind has a usage); of one ``kind`` only
    when given. A figure that is not a measure (a hand-written usage) is left out."""
    params = {"window": window, "limit": limit, "kind": kind}
    try:
        with conn.transaction():
            rows = conn.execute(_KIND_USAGE_PLAIN, params).fetchall()
    except psycopg.errors.DataError:
        rows = conn.execute(_KIND_USAGE_GUARDED, params).fetchall()
    out = []
    for name, jobs, failure_rate, wall, cpu, rss in rows:
        out.append({"kind": name, "jobs": jobs, "failure_rate": failure_rate,
                    "wall_seconds": percentile_pair(wall), "cpu_seconds": percentile_pair(cpu),
                    "max_rss_bytes": percentile_pair(rss, whole=True)})
    return out


KEY_WINDOW = 86400.0  # seconds of finished jobs rolled up per concurrency key


def key_usage(conn: psycopg.Connection, window: float = KEY_WINDOW) -> list[dict[str, Any]]:
    """Per concurrency key, what its jobs finished in the last ``window`` seconds cost
    over all their attempts (``shared.costs``): ``key``, ``jobs``, ``attempts``,
    ``retries``, ``measured``, ``cpu_seconds``, ``wall_seconds``, ``peak_rss_p95``,
    ``peak_rss_max``; keys in order."""
    return [{"key": key, **rollup.as_dict()}
            for key, rollup in key_costs(conn, window).items()]


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
