"""The operator's views of schedules, batches, kinds and global limits, for the
dashboard's pages of the same names: plain data over the contract tables, each query
bounded by an index so a page costs the same on a table of millions.

Schedules come from the schedules room's own admin (next fire needs its slot rules);
their actions (pause, resume, run now) too. A refusal is ``AdminError``.
"""

from __future__ import annotations

from typing import Any

import psycopg

from shared.batcheta import ETA_LATERAL
from shared.jobs import FINISHED_STATES, STATES
from shared.live_sql import live_jobs
from supervisor.admin.limits import all_limits
from supervisor.admin.refusals import AdminError
from supervisor.admin.status import LIVE_AFTER_SECONDS
from supervisor.admin.usage import kind_usage
from supervisor.schedules import admin as schedules_admin

KIND_WINDOW_HOURS = 24  # finished jobs counted on the kinds page
BATCH_PAGE = 50

# Members by state per batch (jobs_batch_idx), the newest batches first, and each
# one's forecast (shared.batcheta: measured run times and the children serving it).
_BATCHES = f"""
SELECT b.id, b.total, b.callback_kind, b.callback_queue, b.callback_id, b.created_at,
       b.finished_at, cb.state AS callback_state, b.stop_kind, b.stop_reason,
       b.paused_at IS NOT NULL AS paused,
       m.counts, f.mean_run, f.workers, f.eta
FROM (SELECT * FROM supervisor.batches
      WHERE %(id)s::bigint IS NULL OR id = %(id)s::bigint
      ORDER BY id DESC LIMIT %(limit)s) AS b
LEFT JOIN supervisor.jobs cb ON cb.id = b.callback_id
CROSS JOIN LATERAL (
    SELECT coalesce(jsonb_object_agg(s.state, s.n), '{{}}'::jsonb) AS counts
    FROM (SELECT state, count(*) AS n FROM supervisor.jobs
          WHERE batch_id = b.id GROUP BY state) AS s
) AS m
CROSS JOIN LATERAL ({ETA_LATERAL}) AS f
ORDER BY b.id DESC
"""

# Jobs in flight per kind (the partial indexes of their states: ``shared.live_sql``),
# and the last day's finished ones with their run times (the finished index).
_KINDS_LIVE = f"""
SELECT kind, state, count(*) FROM ({live_jobs("kind, state")}) AS live
GROUP BY kind, state
"""
_KINDS_FINISHED = """
SELECT kind,
       count(*) FILTER (WHERE state = 'completed') AS completed,
       count(*) FILTER (WHERE state = 'discarded') AS discarded,
       count(*) FILTER (WHERE state = 'cancelled') AS cancelled,
       count(*) FILTER (WHERE state = 'expired') AS expired,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - attempted_at))
           FILTER (WHERE state = 'completed' AND attempted_at IS NOT NULL) AS p50,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - attempted_at))
           FILTER (WHERE state = 'completed' AND attempted_at IS NOT NULL) AS p95
FROM supervisor.jobs
WHERE state IN ('completed', 'discarded', 'cancelled', 'expired')
  AND finished_at > now() - %(hours)s * interval '1 hour'
GROUP BY kind
"""

_LEASES = """
SELECT l.queue, l.owner, l.slots, l.want_slots, l.rate, l.want_rate,
       extract(epoch FROM l.expires_at - now())::float8 AS expires_in,
       s.host, s.pid
FROM supervisor.limit_leases l
LEFT JOIN supervisor.supervisors s ON s.id = l.owner
WHERE l.expires_at >= now()
ORDER BY l.queue, l.owner
"""


def schedules(conn: psycopg.Connection) -> list[dict[str, Any]]:
    """Every schedule: name, kind, queue, expression, status, next and last fire, the
    last fire's job and its state (see ``supervisor.schedules.admin``)."""
    return schedules_admin.list_schedules(conn)


def schedule_action(conn: psycopg.Connection, name: str, action: str) -> dict[str, Any]:
    """``pause``, ``resume`` or ``run`` (enqueue now) schedule ``name``:
    ``{name, action, was_paused | job_id}``; ``AdminError`` for an unknown one."""
    try:
        if action == "run":
            return {"name": name, "action": action,
                    "job_id": schedules_admin.run_now(conn, name)}
        if action == "pause":
            return {"name": name, "action": action,
                    "was_paused": schedules_admin.pause(conn, name)}
        if action == "resume":
            return {"name": name, "action": action,
                    "was_paused": schedules_admin.resume(conn, name)}
    except schedules_admin.UnknownSchedule:
        raise AdminError(f"no schedule named {name!r}") from None
    raise AdminError(f"unknown schedule action {action!r}", usage=True)


def batches(conn: psycopg.Connection, limit: int = BATCH_PAGE,
            batch_id: int | None = None) -> list[dict[str, Any]]:
    """The newest batches (or the one ``batch_id``): ``total``, members by state
    (``counts``), ``done`` (finished members), ``percent``, the callback (kind, job id,
    state), ``stop_kind`` and ``stop_reason`` (cancelled or aborted), ``paused``,
    ``mean_run`` (seconds), ``workers`` (children serving it) and ``eta`` (seconds; see
    ``shared.batcheta``: None when unknown)."""
    cur = conn.execute(_BATCHES, {"limit": limit, "id": batch_id,
                                  "live": LIVE_AFTER_SECONDS})
    assert cur.description is not None  # a SELECT describes its columns
    names = [d.name for d in cur.description]
    out = []
    for row in cur:
        batch = dict(zip(names, row, strict=True))
        counts = {state: int(batch["counts"].get(state, 0)) for state in STATES}
        done = sum(counts[s] for s in FINISHED_STATES)
        left = max(batch["total"] - done, 0)
        batch.update(counts=counts, done=done, left=left,
                     percent=100.0 * done / batch["total"] if batch["total"] else 100.0)
        out.append(batch)
    return out


def kinds(conn: psycopg.Connection, hours: int = KIND_WINDOW_HOURS) -> list[dict[str, Any]]:
    """Every kind with jobs in flight or finished in the last ``hours``: in-flight
    counts by state, finished counts, ``failure_rate`` (discarded over completed plus
    discarded), the completed jobs' run time ``p50`` and ``p95`` (seconds), and
    ``cpu_seconds`` and ``max_rss_bytes`` as ``{"p50", "p95"}`` of the newest finished
    jobs' last attempts (``supervisor.admin.usage``: the last hour's newest 10,000, so
    the page's cost stays bounded; None when none of them was measured)."""
    found: dict[str, dict[str, Any]] = {}

    def entry(kind: str) -> dict[str, Any]:
        if kind not in found:
            found[kind] = {"kind": kind, "counts": dict.fromkeys(STATES, 0),
                           "failure_rate": None, "p50": None, "p95": None,
                           "cpu_seconds": None, "max_rss_bytes": None}
        return found[kind]

    for kind, state, n in conn.execute(_KINDS_LIVE):
        entry(kind)["counts"][state] = n
    for kind, completed, discarded, cancelled, expired, p50, p95 in conn.execute(
            _KINDS_FINISHED, {"hours": hours}):
        item = entry(kind)
        item["counts"].update(completed=completed, discarded=discarded, cancelled=cancelled,
                              expired=expired)
        if completed + discarded:
            item["failure_rate"] = discarded / (completed + discarded)
        item["p50"], item["p95"] = p50, p95
    for usage in kind_usage(conn):
        if usage["kind"] in found:  # finished within the hour: within the day too
            found[usage["kind"]].update(cpu_seconds=usage["cpu_seconds"],
                                        max_rss_bytes=usage["max_rss_bytes"])
    return [found[k] for k in sorted(found)]


def limits(conn: psycopg.Connection) -> list[dict[str, Any]]:
    """Every queue with global limits: the limits, and each live supervisor's slice
    (``leases``: owner, host, pid, slots and rate held and wanted, seconds left)."""
    leases: dict[str, list[dict[str, Any]]] = {}
    cur = conn.execute(_LEASES)
    assert cur.description is not None  # a SELECT describes its columns
    names = [d.name for d in cur.description]
    for row in cur:
        lease = dict(zip(names, row, strict=True))
        leases.setdefault(lease["queue"], []).append(lease)
    out = []
    for queue, values in sorted(all_limits(conn).items()):
        held = leases.get(queue, [])
        out.append({"queue": queue, **values, "leases": held,
                    "slots_held": sum(lease["slots"] for lease in held),
                    "rate_held": sum(lease["rate"] for lease in held)})
    return out
