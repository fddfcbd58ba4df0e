"""The history behind the dashboard's charts: finished jobs per bucket of time from
the per-minute rollup (``supervisor.job_minutes``) and queue depth from the per-minute
samples (``supervisor.queue_minutes``), both written by the maintenance leader
(``supervisor.db.history``). Each answer is one query bounded by the tables' keys
(minute first), so a chart costs the same on a jobs table of millions.

Buckets run oldest first, the empty ones included, and end with the last closed
bucket: the open one is not rolled up yet and would read as a drop.
"""

from __future__ import annotations

from typing import Any

import psycopg

# The buckets: ``buckets`` of one ``unit`` (a minute or an hour) ending before the
# open one. Rows are read by one range over the table's key (minute first) and added
# up per bucket with date_trunc (numeric epoch arithmetic on every row cost 100 ms a
# day), then joined to the list of buckets so the empty ones show.
_SPAN = "span AS (SELECT date_trunc(%(unit)s, now()) AS upto)"
_SERIES = """generate_series(span.upto - %(buckets)s::int * ('1 ' || %(unit)s)::interval,
                span.upto - ('1 ' || %(unit)s)::interval,
                ('1 ' || %(unit)s)::interval) AS b(t)"""
_BUCKET_OF = "date_trunc(%(unit)s, {col})"
_IN_SPAN = """{col} >= span.upto - %(buckets)s::int * ('1 ' || %(unit)s)::interval
      AND {col} < span.upto"""

_FINISHED = f"""
WITH {_SPAN},
m AS (
    SELECT {_BUCKET_OF.format(col="minute")} AS t, sum(completed) AS completed,
           sum(discarded) AS discarded, sum(retried) AS retried,
           sum(run_sum) AS run_sum, sum(run_n) AS run_n, sum(wait_sum) AS wait_sum,
           sum(wait_n) AS wait_n, max(run_p95) AS run_p95, max(wait_p95) AS wait_p95,
           sum(cpu_seconds) AS cpu_seconds, max(max_rss_bytes) AS max_rss_bytes
    FROM supervisor.job_minutes, span
    WHERE {_IN_SPAN.format(col="minute")}
      AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
      AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
    GROUP BY 1)
SELECT b.t AS at, coalesce(m.completed, 0)::int AS completed,
       coalesce(m.discarded, 0)::int AS failed, coalesce(m.retried, 0)::int AS retried,
       (m.run_sum / nullif(m.run_n, 0))::float8 AS run_mean,
       (m.wait_sum / nullif(m.wait_n, 0))::float8 AS wait_mean,
       m.run_p95::float8 AS run_p95, m.wait_p95::float8 AS wait_p95,
       -- A bucket without jobs cost nothing; one whose jobs have no usage is unknown.
       CASE WHEN m.t IS NULL THEN 0 ELSE m.cpu_seconds END::float8 AS cpu_seconds,
       m.max_rss_bytes::bigint AS max_rss_bytes
FROM span CROSS JOIN {_SERIES}
LEFT JOIN m ON m.t = b.t
ORDER BY b.t
"""

# A bucket's depth is its largest sample (a minute without one had nothing waiting or
# running, or no leader: 0 either way on the chart).
_DEPTH = f"""
WITH {_SPAN},
d AS (
    SELECT {_BUCKET_OF.format(col="minute")} AS t, max(available) AS available,
           max(running) AS running, max(oldest_wait) AS oldest_wait
    FROM supervisor.queue_minutes, span
    WHERE {_IN_SPAN.format(col="minute")} AND queue = %(queue)s::text
    GROUP BY 1)
SELECT b.t AS at, coalesce(d.available, 0)::int AS available,
       coalesce(d.running, 0)::int AS running, d.oldest_wait::float8 AS oldest_wait
FROM span CROSS JOIN {_SERIES}
LEFT JOIN d ON d.t = b.t
ORDER BY b.t
"""

HOUR = (60, "minute")  # (buckets, unit): the last hour by minute
DAY = (24, "hour")  # the last day by hour
UNITS = ("minute", "hour")


def _rows(cur: psycopg.Cursor) -> list[dict[str, Any]]:
    assert cur.description is not None  # a SELECT describes its columns
    names = [d.name for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur]


def finished(conn: psycopg.Connection, buckets: int, unit: str, *,
             queue: str | None = None, kind: str | None = None) -> list[dict[str, Any]]:
    """The last ``buckets`` ``unit`` buckets (``minute`` or ``hour``) of finished
    jobs, of one ``queue`` and/or ``kind`` or all: ``at``, ``completed``, ``failed``
    (discarded), ``retried``, ``run_mean``, ``wait_mean``, ``run_p95`` and
    ``wait_p95`` (seconds, None without jobs; a bucket's p95 is the largest of its
    minutes', an upper bound), ``cpu_seconds`` (the jobs' CPU time added up: 0
    without jobs, None when none of them has a usage) and ``max_rss_bytes`` (the
    largest peak memory, None without a usage)."""
    return _rows(conn.execute(_FINISHED, {"buckets": buckets, "unit": _unit(unit),
                                          "queue": queue, "kind": kind}))


def depth(conn: psycopg.Connection, buckets: int, unit: str,
          queue: str) -> list[dict[str, Any]]:
    """The last ``buckets`` ``unit`` buckets of ``queue``'s depth: ``at``,
    ``available``, ``running`` (the largest sample in the bucket) and ``oldest_wait``
    (seconds; None without a sample)."""
    return _rows(conn.execute(_DEPTH, {"buckets": buckets, "unit": _unit(unit),
                                       "queue": queue}))


def _unit(unit: str) -> str:
    if unit not in UNITS:
        raise ValueError(f"a chart's bucket is a minute or an hour, not {unit!r}")
    return unit


# The last ``hours`` of the rollup added up per kind (of one queue) or per queue (of
# one kind): a few thousand rows of job_minutes at most, through its key.
_TOTALS = """
SELECT {by} AS name, sum(completed)::int AS completed, sum(discarded)::int AS failed,
       sum(cancelled)::int AS cancelled, sum(retried)::int AS retried,
       (sum(run_sum) / nullif(sum(run_n), 0))::float8 AS run_mean,
       max(run_p95)::float8 AS run_p95,
       (sum(wait_sum) / nullif(sum(wait_n), 0))::float8 AS wait_mean,
       sum(cpu_seconds)::float8 AS cpu_seconds, max(max_rss_bytes)::bigint AS max_rss_bytes
FROM supervisor.job_minutes
WHERE minute >= now() - %(hours)s * interval '1 hour' AND {where} = %(name)s::text
GROUP BY {by}
ORDER BY {by}
"""
_TOTALS_BY = {"kind": _TOTALS.format(by="kind", where="queue"),
              "queue": _TOTALS.format(by="queue", where="kind")}


def totals(conn: psycopg.Connection, hours: int, *, queue: str | None = None,
           kind: str | None = None) -> list[dict[str, Any]]:
    """The finished jobs of the last ``hours`` from the rollup: per kind of ``queue``,
    or per queue of ``kind`` (give one): ``name``, ``completed``, ``failed``,
    ``cancelled``, ``retried``, ``run_mean``, ``run_p95`` (an upper bound),
    ``wait_mean``, ``cpu_seconds`` (added up) and ``max_rss_bytes`` (the largest; both
    None without a usage), and ``failure_rate`` (failed over completed plus failed; None
    without either)."""
    if (queue is None) == (kind is None):
        raise ValueError("totals: give a queue or a kind")
    sql = _TOTALS_BY["kind"] if queue is not None else _TOTALS_BY["queue"]
    rows = _rows(conn.execute(sql, {"hours": hours, "name": queue if queue is not None
                                    else kind}))
    for row in rows:
        ended = row["completed"] + row["failed"]
        row["failure_rate"] = row["failed"] / ended if ended else None
    return rows
