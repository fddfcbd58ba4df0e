"""``supervisor kinds list|pause|resume``: the kinds paused (by the breaker or by
hand), pausing one by hand, ending a pause."""

from __future__ import annotations

from typing import Any

import psycopg

from shared.validation import short_name
from supervisor.breaker import sql


def list_kinds(conn: psycopg.Connection) -> list[dict[str, Any]]:
    """Every kind with a pause row: paused now or not (a cool-down that ran out)."""
    cur = conn.execute(sql.LIST)
    names = [d.name for d in cur.description or ()]
    return [dict(zip(names, row, strict=True)) for row in cur]


def pause_kind(conn: psycopg.Connection, kind: str, seconds: float | None,
               reason: str = "paused by hand") -> None:
    """Pause ``kind`` on every supervisor (``seconds``: for that long; None: until
    resumed). A kind longer than the schema's limit is keyed by its ``short_name``, as
    the breaker keys it."""
    conn.execute(sql.PAUSE, {"kind": short_name(kind), "seconds": seconds, "reason": reason})


def resume_kind(conn: psycopg.Connection, kind: str) -> bool:
    """End ``kind``'s pause (and forget its recent crashes); False if it had none."""
    row = conn.execute(sql.RESUME, {"kind": short_name(kind)}).fetchone()
    return bool(row and row[0])
