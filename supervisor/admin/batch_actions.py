"""A batch acted on as one thing, for the dashboard's batch page: how many members an
action would touch (the page shows it and asks to confirm), and the action itself,
through ``shared.batches_actions`` (the same chunked code as ``supervisor batches`` and
``Batch.cancel()``), its refusals turned into ``AdminError``.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import psycopg

from shared import batches_actions
from shared.batches_actions import BatchActionRefused
from supervisor.admin.refusals import AdminError

# What each action applies to, as the page counts it before the operator confirms.
ACTION_STATES: dict[str, tuple[str, ...]] = {
    "cancel": ("available", "scheduled", "running", "retryable"),
    "retry": ("discarded",),
    "pause": ("available", "scheduled", "retryable"),
    "resume": ("scheduled",),
    "priority": ("available", "scheduled", "retryable"),
}


class UnknownBatch(AdminError):
    """No batch has this id (the dashboard answers 404)."""


def parse_batch_id(text: str) -> int:
    """A batch id from a URL, or ``AdminError`` (usage) naming what is wrong."""
    value = text.strip()
    if not value.isdigit() or not 0 < int(value) < 2**63:
        raise AdminError(f"a batch id is a positive integer; got {text!r}", usage=True)
    return int(value)


def check_action(action: str) -> str:
    """``action`` if it is one of ``ACTION_STATES``, else ``AdminError`` (usage)."""
    if action not in ACTION_STATES:
        raise AdminError(f"unknown batch action {action!r}; one of "
                         f"{', '.join(ACTION_STATES)}", usage=True)
    return action


def parse_priority(text: str | None) -> int:
    """The priority of ``priority``: a 32-bit integer, else ``AdminError`` (usage)."""
    try:
        value = int(text or "")
    except ValueError:
        raise AdminError(f"priority is an integer (lower runs first), not {text!r}",
                         usage=True) from None
    if not -(2**31) <= value < 2**31:
        raise AdminError(f"priority must be a 32-bit integer, not {value}", usage=True)
    return value


def count(conn: psycopg.Connection, batch_id: int, action: str) -> int:
    """Members of the batch the action would apply to now; ``UnknownBatch`` if none."""
    row = conn.execute(
        "SELECT (SELECT count(*) FROM supervisor.jobs WHERE batch_id = b.id "
        "AND state = ANY(%s)) FROM supervisor.batches b WHERE b.id = %s",
        (list(ACTION_STATES[check_action(action)]), batch_id)).fetchone()
    if row is None:
        raise UnknownBatch(f"batch {batch_id} does not exist")
    return int(row[0])


def act(conn: psycopg.Connection, batch_id: int, action: str,
        priority: int | None = None) -> dict[str, Any]:
    """Run ``action`` on the batch (``conn`` in autocommit mode: it works in chunks):
    ``{batch_id, action, changed, seconds}``. An unknown batch is ``UnknownBatch``; a
    finished one, or an action that does not apply now, ``AdminError`` with nothing
    changed."""
    check_action(action)
    try:
        if action == "priority":
            if priority is None:
                raise AdminError("priority needs ?priority=N", usage=True)
            result = batches_actions.reprioritize(conn, batch_id, priority)
        elif action == "retry":
            result = batches_actions.retry_failed(conn, batch_id)
        else:
            result = getattr(batches_actions, action)(conn, batch_id)
    except LookupError as exc:
        raise UnknownBatch(str(exc)) from None
    except BatchActionRefused as exc:
        raise AdminError(str(exc)) from None
    return asdict(result)
