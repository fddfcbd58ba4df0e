"""The data of one queue's page and one kind's page: the figures now, the last day's
totals and the charts' history (finished jobs per minute over the last hour and per
hour over the last day, wait and run time, and for a queue its depth and oldest wait),
all read on one connection (one per request, as every page).

Plain functions over an autocommit psycopg connection returning plain data; the
history comes from the rollup tables (``supervisor.admin.history``), never from a pass
over the jobs table.
"""

from __future__ import annotations

from typing import Any

import psycopg

from shared.jobs import STATES
from shared.live_sql import live_jobs
from supervisor import admin
from supervisor.dashboard.queries import NotFound

DAY_HOURS = 24

# A kind's jobs in flight now, through the partial indexes of their states
# (``shared.live_sql``): what is in flight is read, not the table's history.
_KIND_LIVE = f"""
SELECT state, count(*) FROM ({live_jobs("state", where="kind = %(kind)s")}) AS live
GROUP BY state
"""


def _check_name(what: str, name: str) -> None:
    # PostgreSQL text cannot hold a NUL byte: refuse it as every filter does (400).
    if "\x00" in name:
        raise admin.AdminError(f"a {what} name cannot hold a NUL byte", usage=True)
    if what == "queue":
        admin.check_queue_name(name)


def _charts(conn: psycopg.Connection, queue: str | None = None,
            kind: str | None = None) -> dict[str, list[dict[str, Any]]]:
    hour, day = admin.history.HOUR, admin.history.DAY
    return {"hour": admin.history.finished(conn, *hour, queue=queue, kind=kind),
            "day": admin.history.finished(conn, *day, queue=queue, kind=kind)}


def queue(conn: psycopg.Connection, name: str,
          finished: admin.FinishedTally | None = None) -> dict[str, Any]:
    """One queue: its figures now (as the queues page: counts, rate, oldest wait,
    drain forecast, limits, paused), the last day's totals per kind, and ``history``
    (``hour`` and ``day`` of finished jobs) and ``depth`` (``hour`` and ``day``).
    ``NotFound`` when no job, row or supervisor names it."""
    _check_name("queue", name)
    found = [q for q in admin.queue_stats(conn, finished) if q["name"] == name]
    if not found:
        raise NotFound(f"no queue named {name!r} (no jobs, no settings)")
    return {"queue": found[0], "kinds": admin.history.totals(conn, DAY_HOURS, queue=name),
            "history": _charts(conn, queue=name),
            "depth": {"hour": admin.history.depth(conn, *admin.history.HOUR, name),
                      "day": admin.history.depth(conn, *admin.history.DAY, name)}}


def kind(conn: psycopg.Connection, name: str) -> dict[str, Any]:
    """One kind: its jobs in flight by state, the last day's totals per queue (from the
    rollup, with CPU seconds and peak memory), ``usage`` (p50/p95 of its newest
    finished jobs' ``cpu_seconds`` and ``max_rss_bytes``, as on the kinds page) and
    ``history`` (``hour`` and ``day`` of finished jobs). ``NotFound`` when
    it has no job in flight and none finished in the last day."""
    _check_name("kind", name)
    counts = dict.fromkeys(STATES, 0)
    for state, n in conn.execute(_KIND_LIVE, {"kind": name}):
        counts[state] = n
    queues = admin.history.totals(conn, DAY_HOURS, kind=name)
    if not any(counts.values()) and not queues:
        raise NotFound(f"no kind named {name!r} with jobs in flight or finished in the "
                       f"last {DAY_HOURS} hours")
    day: dict[str, Any] = {key: sum(q[key] for q in queues)
                           for key in ("completed", "failed", "retried")}
    ended = day["completed"] + day["failed"]
    day["failure_rate"] = day["failed"] / ended if ended else None
    cpu = [q["cpu_seconds"] for q in queues if q["cpu_seconds"] is not None]
    rss = [q["max_rss_bytes"] for q in queues if q["max_rss_bytes"] is not None]
    day["cpu_seconds"] = sum(cpu) if cpu else None
    day["max_rss_bytes"] = max(rss) if rss else None
    recent = admin.kind_usage(conn, kind=name)
    usage = {"cpu_seconds": recent[0]["cpu_seconds"] if recent else None,
             "max_rss_bytes": recent[0]["max_rss_bytes"] if recent else None}
    return {"kind": name, "counts": counts, "queues": queues, "day": day, "usage": usage,
            "history": _charts(conn, kind=name)}
