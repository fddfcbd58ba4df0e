"""Global limits as the operator sets and reads them (``supervisor queues limit``, and the
LIMITS column of ``queues list`` and ``status``): plain functions over an autocommit
connection returning plain data, and the parsing of the values a person types.

Values are parsed strictly from their text: a whole number is digits only ("5", not
"5.0", "+5", " 5" or "1e3"), a rate is a plain decimal ("20", "0.5"); "none" lifts one
limit. A number that arrives quoted from a config template or a SQL client ("'5'") is
refused with a message that shows the quotes, rather than read as something else.
"""

from __future__ import annotations

import re
from typing import Any

import psycopg

from supervisor.admin.refusals import AdminError, check_queue_name

LIMIT_FIELDS = ("max_running", "max_rate", "burst", "per_key_max_running")
_WHOLE = re.compile(r"[0-9]+")
_DECIMAL = re.compile(r"[0-9]+(\.[0-9]+)?")
NONE_WORDS = ("none",)
MAX_INT = 2**31 - 1  # the columns are integer
MAX_RATE = 1e9

_READ_ALL = """
SELECT queue, max_running, max_rate, burst, per_key_max_running FROM supervisor.queue_limits
"""

_READ_ONE = """
SELECT max_running, max_rate, burst, per_key_max_running FROM supervisor.queue_limits
WHERE queue = %(queue)s FOR UPDATE
"""

_WRITE = """
INSERT INTO supervisor.queue_limits AS l
    (queue, max_running, max_rate, burst, per_key_max_running, updated_at)
VALUES (%(queue)s, %(max_running)s, %(max_rate)s, %(burst)s, %(per_key_max_running)s, now())
ON CONFLICT (queue) DO UPDATE
SET max_running = EXCLUDED.max_running, max_rate = EXCLUDED.max_rate,
    burst = EXCLUDED.burst, per_key_max_running = EXCLUDED.per_key_max_running,
    updated_at = now()
"""

_DELETE = "DELETE FROM supervisor.queue_limits WHERE queue = %(queue)s RETURNING 1"

# Who holds what now: the live slices, for the operator's eye.
_SLICES = """
SELECT queue, count(*), coalesce(sum(slots), 0), coalesce(sum(rate), 0)
FROM supervisor.limit_leases WHERE expires_at >= now() GROUP BY queue
"""


def parse_whole(option: str, text: str | None, minimum: int) -> int | None:
    """``text`` as a whole number >= ``minimum``; None for "none"; ``AdminError``
    (usage) naming ``option`` otherwise."""
    if text is None or text.strip().lower() in NONE_WORDS:
        return None
    if not _WHOLE.fullmatch(text):
        raise AdminError(f"{option} must be a whole number >= {minimum} (or none), got "
                         f"{text!r}{_quoted_hint(text)}", usage=True)
    value = int(text)
    if value < minimum or value > MAX_INT:
        raise AdminError(f"{option} must be a whole number from {minimum} to {MAX_INT} (or "
                         f"none), got {text}", usage=True)
    return value


def parse_rate(option: str, text: str | None) -> float | None:
    """``text`` as a rate in jobs per second (> 0); None for "none"."""
    if text is None or text.strip().lower() in NONE_WORDS:
        return None
    if not _DECIMAL.fullmatch(text):
        raise AdminError(f"{option} must be a positive number of jobs per second (or none), "
                         f"got {text!r}{_quoted_hint(text)}", usage=True)
    value = float(text)
    if not 0 < value <= MAX_RATE:
        raise AdminError(f"{option} must be more than 0 and at most {MAX_RATE:g} jobs per "
                         f"second, got {text}", usage=True)
    return value


def _quoted_hint(text: str) -> str:
    stripped = text.strip()
    if len(stripped) >= 2 and stripped[0] == stripped[-1] and stripped[0] in "'\"":
        return " (a quoted number: drop the quotes)"
    return ""


def all_limits(conn: psycopg.Connection) -> dict[str, dict[str, Any]]:
    """Every queue's global limits: ``{queue: {max_running, max_rate, burst,
    per_key_max_running}}`` (None where a limit is not set)."""
    return {row[0]: dict(zip(LIMIT_FIELDS, row[1:], strict=True))
            for row in conn.execute(_READ_ALL)}


def live_slices(conn: psycopg.Connection) -> dict[str, dict[str, Any]]:
    """Per limited queue, the live slices: ``{supervisors, slots, rate}`` held now."""
    return {q: {"supervisors": n, "slots": int(slots), "rate": float(rate)}
            for q, n, slots, rate in conn.execute(_SLICES)}


def set_limits(conn: psycopg.Connection, queue: str, changes: dict[str, Any],
               clear: bool) -> dict[str, Any] | None:
    """Apply ``changes`` (a subset of ``LIMIT_FIELDS``; None lifts that limit) to
    ``queue``'s limits, or lift them all (``clear``). Returns the limits now in force
    (None: none). Lifting the rate lifts its burst; a burst needs a rate."""
    check_queue_name(queue)
    with conn.transaction():
        if clear:
            conn.execute(_DELETE, {"queue": queue})
            return None
        row = conn.execute(_READ_ONE, {"queue": queue}).fetchone()
        current = dict(zip(LIMIT_FIELDS, row, strict=True)) if row else dict.fromkeys(
            LIMIT_FIELDS)
        merged = current | changes
        if "max_rate" in changes and changes["max_rate"] is None:
            merged["burst"] = None
        if merged["burst"] is not None and merged["max_rate"] is None:
            raise AdminError("--burst needs a rate: give --max-rate too", usage=True)
        if all(merged[f] is None for f in LIMIT_FIELDS):
            conn.execute(_DELETE, {"queue": queue})
            return None
        conn.execute(_WRITE, {"queue": queue, **merged})
    return merged
