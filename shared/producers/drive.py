"""Running a plan on a psycopg cursor, and the one-line errors every driver shares."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import errors as pg_errors

from shared.db import DatabaseUnavailable, SchemaMissing, first_line
from shared.producers.connections import where
from shared.producers.plans import INSERT_NOW, Copy, Plan, Row


def drive(cur: psycopg.Cursor, plan: Plan, *, atomic: bool) -> Any:
    """Run ``plan`` on ``cur`` (in a transaction of its own when ``atomic``) and return
    its result; a missing schema or a lost connection becomes one clear line."""
    raw = cur.connection
    try:
        if atomic:
            with raw.transaction():
                return _steps(cur, plan)
        return _steps(cur, plan)
    except (pg_errors.UndefinedTable, pg_errors.InvalidSchemaName) as exc:
        raise missing_schema(exc) from exc
    except psycopg.OperationalError as exc:
        if raw.closed or raw.broken:
            raise lost_connection(raw, exc) from None
        raise


def drive_row(cur: psycopg.Cursor, row: Row) -> int:
    """``drive`` for the one plain INSERT of a ``Row``, without a plan's generator: this
    is every lone web request's enqueue, so each microsecond shows in the per-call cost."""
    try:
        cur.execute(INSERT_NOW, row)
        return cur.fetchone()[0]  # type: ignore[index]
    except (pg_errors.UndefinedTable, pg_errors.InvalidSchemaName) as exc:
        raise missing_schema(exc) from exc
    except psycopg.OperationalError as exc:
        raw = cur.connection
        if raw.closed or raw.broken:
            raise lost_connection(raw, exc) from None
        raise


def _steps(cur: psycopg.Cursor, plan: Plan) -> Any:
    reply = None
    while True:
        try:
            step = plan.send(reply)
        except StopIteration as done:
            return done.value
        if type(step) is Copy:
            utf8 = cur.connection.info.encoding == "utf-8"
            with cur.copy(step.statement) as copy:
                for chunk in step.chunks:
                    # str is re-encoded by psycopg into a non-UTF-8 client encoding
                    copy.write(chunk if utf8 else chunk.decode())
            reply = None
        else:
            cur.execute(step.query, step.params)
            reply = cur.fetchall()


def missing_schema(exc: psycopg.Error) -> SchemaMissing:
    """The one-line error for a database without our schema."""
    return SchemaMissing(
        "the supervisor schema is missing in this database; run `supervisor migrate` "
        f"({exc.diag.message_primary})"
    )


def lost_connection(raw: Any, exc: BaseException) -> DatabaseUnavailable:
    """The one-line error for a connection lost while a statement was on its way: whether
    the server applied it is unknown (a commit may have been under way)."""
    return DatabaseUnavailable(
        f"lost the connection to PostgreSQL at {where(raw)} during enqueue; "
        f"the job was not confirmed: {first_line(exc)}"
    )
