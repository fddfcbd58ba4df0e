"""The MVCC horizon as ``status`` and the dashboard show it (issue 40): who holds it back,
for how long, and the dead row versions it keeps in ``supervisor.jobs``."""

from __future__ import annotations

from typing import Any

import psycopg

from shared.horizon import read_horizon

SHOWN_AFTER = 60.0  # seconds: a hold shorter than this is ordinary work, not news


def horizon(conn: psycopg.Connection) -> dict[str, Any]:
    """JSON-ready: ``held_seconds`` (0: nothing holds a snapshot now), ``holder`` (its
    sort, pid, application, role, state, since, query and a one-line ``describe``; None
    when nothing holds one), ``dead_rows`` and ``live_rows`` of the queue table, and
    ``notable`` (held long enough to be worth a line in ``status``, or a slot nobody
    consumes)."""
    report = read_horizon(conn)
    holder = report.holder
    described = None
    if holder is not None:
        described = {"sort": holder.sort, "pid": holder.pid,
                     "application": holder.application, "role": holder.role,
                     "state": holder.state,
                     "since": holder.since.isoformat() if holder.since else None,
                     "query": holder.query, "xmin_age": holder.xmin_age,
                     "describe": holder.describe()}
    notable = holder is not None and (
        report.held_seconds >= SHOWN_AFTER
        or (holder.sort == "replication slot" and holder.state == "inactive"))
    return {"held_seconds": round(report.held_seconds, 1), "holder": described,
            "dead_rows": report.dead_rows, "live_rows": report.live_rows,
            "notable": notable}


def describe_horizon(found: dict[str, Any] | None) -> str | None:
    """The line ``status`` prints for a notable hold (None: nothing worth saying)."""
    if not found or not found.get("notable") or not found.get("holder"):
        return None
    held = found["held_seconds"]
    age = f"for {held:.0f} s " if held else ""
    return (f"the MVCC horizon is held {age}by {found['holder']['describe']}: "
            f"{found['dead_rows']:,} dead row versions in supervisor.jobs cannot be "
            f"vacuumed, and claims slow down as they pile up (docs/operations.md, "
            f"'A pinned MVCC horizon')")
