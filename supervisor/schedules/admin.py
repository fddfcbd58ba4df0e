"""Operator queries over schedules, returning plain data: list, pause, resume, run now.

They work on the database alone (no supervisor need be running): the definitions are
the ones the supervisors last declared, stored in ``supervisor.schedules``.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import psycopg

from shared.schedules import ScheduleSpec
from supervisor.schedules import store
from supervisor.schedules.slots import next_slot

# A schedule no supervisor has declared for this long is orphaned: removed from the code
# or config of every running supervisor (or no supervisor runs). It is kept, not fired.
ORPHAN_AFTER = timedelta(seconds=90)


class UnknownSchedule(LookupError):
    """No schedule by that name."""


def list_schedules(conn: psycopg.Connection) -> list[dict[str, Any]]:
    """Every stored schedule: name, kind, queue, expression, timezone, status (active,
    paused, orphaned), next fire, last fire and its job's state."""
    out = []
    for row in store.list_rows(conn):
        spec = ScheduleSpec(name=row["name"], kind=row["kind"], cron=row["cron"],
                            every=row["every"], timezone=row["timezone"])
        orphaned = row["unseen_for"] > ORPHAN_AFTER
        if row["paused"]:
            status = "paused"
        elif orphaned:
            status = "orphaned"
        else:
            status = "active"
        out.append({
            "name": row["name"], "kind": row["kind"], "queue": row["queue"],
            "expression": spec.expression, "timezone": row["timezone"], "status": status,
            "orphaned": orphaned, "source": row["source"], "catch_up": row["catch_up"],
            "overlap": row["overlap"],
            "next_fire": None if status != "active" else _next_fire(spec, row),
            "last_fire": row["last_fired_at"], "last_slot": row["last_slot"],
            "last_job_id": row["last_job_id"],
            "last_state": row["last_state"] if row["last_job_id"] is not None else None,
        })
    return out


def _next_fire(spec: ScheduleSpec, row: dict[str, Any]) -> datetime | None:
    try:
        return next_slot(spec, max(row["done_until"], row["db_now"]))
    except (ValueError, KeyError):  # a row edited by hand into nonsense: show no time
        return None


def pause(conn: psycopg.Connection, name: str) -> bool:
    """Stop firing NAME; returns whether it was paused already."""
    was = store.set_paused(conn, name, True)
    if was is None:
        raise UnknownSchedule(name)
    return was


def resume(conn: psycopg.Connection, name: str) -> bool:
    """Fire NAME again from its next slot (slots passed while paused are not replayed);
    returns whether it was paused."""
    was = store.set_paused(conn, name, False)
    if was is None:
        raise UnknownSchedule(name)
    return was


def run_now(conn: psycopg.Connection, name: str) -> int:
    """Enqueue NAME's job now, outside its slots; returns the job id."""
    job_id = store.fire_now(conn, name)
    if job_id is None:
        raise UnknownSchedule(name)
    return job_id


def upcoming(conn: psycopg.Connection, limit: int = 5) -> list[dict[str, Any]]:
    """The next fires of active schedules, soonest first (for ``status``)."""
    rows = [r for r in list_schedules(conn) if r["next_fire"] is not None]
    rows.sort(key=lambda r: r["next_fire"])
    return [{"name": r["name"], "next_fire": r["next_fire"], "expression": r["expression"]}
            for r in rows[:limit]]
