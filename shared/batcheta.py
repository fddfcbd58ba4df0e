"""When a batch will be done: one query over its members (``jobs_batch_idx``), the
per-minute history and the supervisors' heartbeats, shared by ``Batch.eta()`` and the
dashboard's batches page so both say the same.

The forecast is the members left times their mean run time, divided by the children
that can run them at once:

- mean run time: of the batch's completed members (start to finish); before one has
  completed, of the same kinds in the same queues over the last hour
  (``supervisor.job_minutes``); unknown without either;
- children: those of live supervisors serving the queues of the members left (at most
  one per member left), or the members running now when more run than that. A child
  that also serves other queues is counted whole, so where queues share children the
  forecast is the soonest the batch can be done.
"""

from __future__ import annotations

from typing import NamedTuple

import psycopg

# A supervisor is live while its heartbeat is younger than this (supervisor.admin's
# LIVE_AFTER_SECONDS; shared cannot import the parent's rooms).
LIVE_AFTER_SECONDS = 60.0

# A LATERAL body over a row ``b`` of supervisor.batches (one batch here; the newest
# fifty on the dashboard's page).
ETA_LATERAL = """
SELECT m.left_n AS left, m.running, w.workers, coalesce(m.mean_run, h.mean_run) AS mean_run,
       CASE WHEN m.left_n = 0 THEN 0.0
            WHEN coalesce(m.mean_run, h.mean_run) IS NULL
                 OR greatest(m.running, least(w.workers, m.left_n)) = 0 THEN NULL
            ELSE m.left_n * coalesce(m.mean_run, h.mean_run)
                 / greatest(m.running, least(w.workers, m.left_n)) END AS eta
FROM (SELECT count(*) FILTER (WHERE j.state IN ('available', 'scheduled', 'running', 'retryable'))
                 AS left_n,
             count(*) FILTER (WHERE j.state = 'running' AND j.attempted_at IS NOT NULL)
                 AS running,
             avg(extract(epoch FROM j.finished_at - j.attempted_at))
                 FILTER (WHERE j.state = 'completed' AND j.attempted_at IS NOT NULL)::float8
                 AS mean_run,
             array_agg(DISTINCT j.queue)
                 FILTER (WHERE j.state IN ('available', 'scheduled', 'running',
                                           'retryable')) AS queues,
             array_agg(DISTINCT j.kind)
                 FILTER (WHERE j.state IN ('available', 'scheduled', 'running',
                                           'retryable')) AS kinds
      FROM supervisor.jobs j WHERE j.batch_id = b.id) AS m
CROSS JOIN LATERAL (
    SELECT coalesce(sum(s.children), 0)::int AS workers FROM supervisor.supervisors s
    WHERE s.queues && m.queues
      AND s.heartbeat_at > now() - %(live)s * interval '1 second') AS w
CROSS JOIN LATERAL (
    SELECT (sum(r.run_sum) / nullif(sum(r.run_n), 0))::float8 AS mean_run
    FROM supervisor.job_minutes r
    WHERE m.mean_run IS NULL AND r.minute > now() - interval '1 hour'
      AND r.queue = ANY(m.queues) AND r.kind = ANY(m.kinds)) AS h
"""

_ETA = f"""
SELECT e.* FROM supervisor.batches b CROSS JOIN LATERAL ({ETA_LATERAL}) AS e
WHERE b.id = %(id)s
"""


class BatchForecast(NamedTuple):
    """A batch's forecast: members ``left``, members ``running`` (started), ``workers``
    (children of live supervisors serving their queues), ``mean_run`` (seconds, None
    when unmeasured) and ``eta`` (seconds until done; 0 when none is left; None when
    unknown: no run time measured, or nothing can run them)."""

    left: int
    running: int
    workers: int
    mean_run: float | None
    eta: float | None


def forecast(conn: psycopg.Connection, batch_id: int) -> BatchForecast | None:
    """The forecast of ``batch_id`` in one query; None when there is no such batch."""
    row = conn.execute(_ETA, {"id": batch_id, "live": LIVE_AFTER_SECONDS}).fetchone()
    return None if row is None else BatchForecast(*row)
