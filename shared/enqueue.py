"""Putting jobs into the queue: ``enqueue`` (one job) and ``enqueue_many`` (bulk, COPY).

Everything a caller passes is validated before the database is touched, so bad input is
a ``TypeError``/``ValueError`` naming the problem and nothing half-written. With
``conn=`` the rows go into the caller's own transaction (visible at their commit, gone
at their rollback; we never commit it). Without it we use one cached autocommit
connection per process and DSN, keyed by pid so a forked child never shares its
parent's socket. Cached connections of other pids are kept referenced, never closed:
closing one in a child would end the parent's session.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import orjson
import psycopg
from psycopg import errors as pg_errors

from shared import jobs
from shared.db import SchemaMissing, connect
from shared.dsn import describe, dsn_source, is_embedded, resolve_dsn
from shared.migrate import migrate
from shared.validation import check_name

MAX_QUEUE_NAME = 255  # the schema's CHECK; keeps the name inside a NOTIFY payload
_UNIQUE_CONFLICT_ROUNDS = 20  # a key's live job would have to finish 20 times in a row

_connections: dict[tuple[str, int], psycopg.Connection] = {}
_connections_lock = threading.Lock()

_INSERT_ONE = """
INSERT INTO supervisor.jobs
    (kind, queue, args, state, priority, max_attempts, run_at, timeout, unique_key)
SELECT %(kind)s, %(queue)s, %(args)s::jsonb,
       CASE WHEN t.run_at > now() THEN 'scheduled' ELSE 'available' END,
       %(priority)s, %(max_attempts)s, t.run_at, %(timeout)s, %(unique_key)s
FROM (SELECT COALESCE(%(run_at)s::timestamptz,
                      now() + %(delay)s::float8 * interval '1 second') AS run_at) AS t
ON CONFLICT DO NOTHING
RETURNING id
"""

_LIVE_BY_KEYS = """
SELECT unique_key, id FROM supervisor.jobs
WHERE unique_key = ANY(%s::text[])
  AND state IN ('available', 'scheduled', 'running', 'retryable')
"""

# Ids are reserved up front so COPY (which returns nothing) can still report them, and
# the server's clock decides whether a delayed job is scheduled.
_RESERVE_IDS = """
SELECT now(), ARRAY(SELECT nextval('supervisor.jobs_id_seq') FROM generate_series(1, %s))
"""

_INSERT_KEYED = """
INSERT INTO supervisor.jobs
    (id, kind, queue, args, state, priority, max_attempts, run_at, timeout, unique_key)
SELECT u.id, %(kind)s, %(queue)s, u.args::jsonb, %(state)s, %(priority)s,
       %(max_attempts)s, %(run_at)s, %(timeout)s, u.unique_key
FROM unnest(%(ids)s::bigint[], %(args)s::text[], %(keys)s::text[]) AS u(id, args, unique_key)
ON CONFLICT DO NOTHING
RETURNING id
"""


def enqueue(
    kind: str,
    args: Mapping[str, Any] | None = None,
    *,
    queue: str = jobs.DEFAULT_QUEUE,
    priority: int = jobs.DEFAULT_PRIORITY,
    max_attempts: int | None = None,
    timeout: float | None = None,
    run_at: datetime | None = None,
    delay: float | None = None,
    unique_key: str | None = None,
    conn: psycopg.Connection | None = None,
    dsn: str | None = None,
) -> int:
    """Insert one job of ``kind`` with ``args`` (a JSON object) and return its id.

    ``run_at`` (timezone-aware) or ``delay`` (seconds) postpone it; ``unique_key`` makes
    this return the id of the live job (available, scheduled, running or retryable) with
    the same key instead of inserting another. ``conn`` inserts in the caller's
    transaction; ``dsn`` picks the database otherwise (see ``shared.dsn``).
    """
    _check_options(kind, queue, priority, max_attempts, timeout, run_at, delay)
    _check_unique_key(unique_key)
    params = {
        "kind": kind, "queue": queue, "args": encode_args(kind, args), "priority": priority,
        "max_attempts": max_attempts, "timeout": timeout, "run_at": run_at,
        "delay": float(delay or 0.0), "unique_key": unique_key,
    }
    with _cursor(conn, dsn) as cur:
        for _ in range(_UNIQUE_CONFLICT_ROUNDS):
            row = cur.execute(_INSERT_ONE, params).fetchone()
            if row is not None:
                return row[0]
            # Conflict: a live job holds the key. It may finish before we look; retry then.
            existing = cur.execute(_LIVE_BY_KEYS, ([unique_key],)).fetchone()
            if existing is not None:
                return existing[1]
    raise RuntimeError(f"unique_key {unique_key!r} kept changing hands; giving up")


def enqueue_many(
    kind: str,
    args_list: Sequence[Mapping[str, Any] | None],
    *,
    queue: str = jobs.DEFAULT_QUEUE,
    priority: int = jobs.DEFAULT_PRIORITY,
    max_attempts: int | None = None,
    timeout: float | None = None,
    run_at: datetime | None = None,
    delay: float | None = None,
    unique_key: str | None = None,
    unique_keys: Sequence[str | None] | None = None,
    conn: psycopg.Connection | None = None,
    dsn: str | None = None,
) -> list[int]:
    """Insert one job of ``kind`` per element of ``args_list``; returns ids in order.

    Uses COPY (fast) unless ``unique_keys`` is given: a key per job (None for no key),
    deduplicated like ``enqueue`` (duplicates within the batch share one job). A single
    ``unique_key`` is only accepted for a one-job batch. Options as for ``enqueue``.
    """
    _check_options(kind, queue, priority, max_attempts, timeout, run_at, delay)
    if not isinstance(args_list, Sequence) or isinstance(args_list, str | bytes | Mapping):
        raise TypeError("args_list must be a list of dicts, one per job")
    if unique_key is not None:
        if len(args_list) != 1 or unique_keys is not None:
            raise ValueError("unique_key names one job; pass unique_keys=[...] for a batch")
        unique_keys = [unique_key]
    if unique_keys is not None:
        if len(unique_keys) != len(args_list):
            raise ValueError(
                f"unique_keys has {len(unique_keys)} entries for {len(args_list)} jobs"
            )
        for key in unique_keys:
            _check_unique_key(key)
    encoded = [_encode_args_bytes(kind, args) for args in args_list]
    if not encoded:
        return []
    with _cursor(conn, dsn) as cur:
        server_now, ids = cur.execute(_RESERVE_IDS, (len(encoded),)).fetchone()  # type: ignore[misc]
        due = _absolute_run_at(server_now, run_at, delay)
        state = jobs.SCHEDULED if due is not None and due > server_now else jobs.AVAILABLE
        common = {"kind": kind, "queue": queue, "state": state, "priority": priority,
                  "max_attempts": max_attempts, "run_at": due or server_now,
                  "timeout": timeout}
        if unique_keys is None:
            _copy_rows(cur, ids, encoded, common, explicit_time=due is not None)
            return ids
        return _insert_keyed(cur, ids, encoded, list(unique_keys), common)


def encode_args(kind: str, args: Mapping[str, Any] | None) -> str:
    """``args`` as JSON object text, or a ``TypeError``/``ValueError`` that says why not."""
    return _encode_args_bytes(kind, args).decode()


def _encode_args_bytes(kind: str, args: Mapping[str, Any] | None) -> bytes:
    if args is None:
        return b"{}"
    if type(args) is not dict:
        if not isinstance(args, Mapping):
            raise TypeError(
                f"args for job {kind!r} must be a dict (a JSON object), "
                f"not {type(args).__name__}"
            )
        args = dict(args)
    try:
        data = orjson.dumps(args)
    except TypeError as exc:  # orjson.JSONEncodeError is a TypeError
        bad_key = next((key for key in args if not isinstance(key, str)), None)
        if bad_key is not None:
            raise TypeError(f"args for job {kind!r} must have str keys, got {bad_key!r}") from None
        raise TypeError(f"args for job {kind!r} are not JSON-encodable: {exc}") from None
    if b"\\u0000" in data:
        # jsonb cannot store NUL in strings; fail here rather than in the database.
        raise ValueError(f"args for job {kind!r} contain a NUL character (\\u0000)")
    return data


def _check_options(
    kind: Any, queue: Any, priority: Any, max_attempts: Any, timeout: Any, run_at: Any,
    delay: Any,
) -> None:
    if not isinstance(kind, str) or not kind:
        raise TypeError(f"job kind must be a non-empty str, not {kind!r}")
    if not isinstance(queue, str) or not queue or len(queue) > MAX_QUEUE_NAME:
        raise ValueError(f"queue must be a str of 1 to {MAX_QUEUE_NAME} characters: {queue!r}")
    check_name("job kind", kind)
    check_name("queue", queue)
    if not _is_int(priority) or not -(2**31) <= priority < 2**31:
        raise TypeError(f"priority must be a 32-bit int, not {priority!r}")
    if max_attempts is not None and (not _is_int(max_attempts)
                                     or not 1 <= max_attempts < 2**31):
        raise ValueError(f"max_attempts must be an int of at least 1, not {max_attempts!r}")
    if timeout is not None and (not _is_number(timeout) or not 0 < timeout < math.inf):
        raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
    if run_at is not None and delay is not None:
        raise ValueError("give either run_at or delay, not both")
    if run_at is not None and (not isinstance(run_at, datetime) or run_at.tzinfo is None):
        raise ValueError(f"run_at must be a timezone-aware datetime, not {run_at!r}")
    if delay is not None and (not _is_number(delay) or not 0 <= delay < math.inf):
        raise ValueError(f"delay must be a number of seconds >= 0, not {delay!r}")


def _check_unique_key(key: Any) -> None:
    if key is not None and (not isinstance(key, str) or not key):
        raise TypeError(f"unique_key must be a non-empty str or None, not {key!r}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _absolute_run_at(now: datetime, run_at: datetime | None, delay: float | None):
    if run_at is not None:
        return run_at
    if delay:
        from datetime import timedelta

        return now + timedelta(seconds=float(delay))
    return None


_COPY_CHUNK = 2000  # rows per write: the server parses one chunk while we build the next


def _copy_rows(cur, ids, encoded, common, *, explicit_time: bool) -> None:
    """COPY in text format from a buffer we build ourselves: psycopg's per-row
    ``write_row`` cost more than the server's whole insert. orjson output holds no raw
    control characters, so a backslash is the only byte COPY text needs escaped in it."""
    if cur.connection.info.encoding != "utf-8":
        _copy_rows_generic(cur, ids, encoded, common, explicit_time=explicit_time)
        return
    columns = "id, kind, queue, args, priority, max_attempts, timeout"
    timeout = common["timeout"]
    attempts = common["max_attempts"]
    tail = b"\t%d\t%s\t%s" % (common["priority"],
                               b"\\N" if attempts is None else b"%d" % attempts,
                               b"\\N" if timeout is None else repr(float(timeout)).encode())
    if explicit_time:  # else state and run_at take their defaults: available, now()
        columns += ", state, run_at"
        tail += b"\t%s\t%s" % (_copy_text(common["state"]),
                                _copy_text(common["run_at"].isoformat()))
    tail += b"\n"
    middle = b"\t%s\t%s\t" % (_copy_text(common["kind"]), _copy_text(common["queue"]))
    with cur.copy(f"COPY supervisor.jobs ({columns}) FROM STDIN") as copy:
        for start in range(0, len(ids), _COPY_CHUNK):
            stop = start + _COPY_CHUNK
            copy.write(b"".join([
                b"%d%s%s%s" % (job_id, middle, args.replace(b"\\", b"\\\\"), tail)
                for job_id, args in zip(ids[start:stop], encoded[start:stop], strict=True)
            ]))


def _copy_rows_generic(cur, ids, encoded, common, *, explicit_time: bool) -> None:
    columns = "id, kind, queue, args, priority, max_attempts, timeout"
    tail: tuple = ()
    if explicit_time:
        columns += ", state, run_at"
        tail = (common["state"], common["run_at"])
    fixed = (common["kind"], common["queue"])
    limits = (common["priority"], common["max_attempts"], common["timeout"])
    with cur.copy(f"COPY supervisor.jobs ({columns}) FROM STDIN") as copy:
        for job_id, args in zip(ids, encoded, strict=True):
            copy.write_row((job_id, *fixed, args.decode(), *limits, *tail))


def _copy_text(value: str) -> bytes:
    """One field in COPY text format."""
    escaped = (value.replace("\\", "\\\\").replace("\n", "\\n")
               .replace("\r", "\\r").replace("\t", "\\t"))
    return escaped.encode()


def _insert_keyed(cur, ids, encoded, keys, common) -> list[int]:
    result: list[int | None] = [None] * len(ids)
    pending = list(range(len(ids)))
    for _ in range(_UNIQUE_CONFLICT_ROUNDS):
        params = dict(common, ids=[ids[i] for i in pending],
                      args=[encoded[i].decode() for i in pending],
                      keys=[keys[i] for i in pending])
        inserted = {row[0] for row in cur.execute(_INSERT_KEYED, params)}
        for i in pending:
            if ids[i] in inserted:
                result[i] = ids[i]
        losers = [i for i in pending if result[i] is None]
        if not losers:
            return result  # type: ignore[return-value]
        live = dict(cur.execute(_LIVE_BY_KEYS, ([keys[i] for i in losers],)).fetchall())
        for i in losers:
            result[i] = live.get(keys[i])
        # Keys whose live job finished between the insert and the look-up: try again
        # with fresh ids (a reserved id is never reused, even when its insert lost).
        pending = [i for i in losers if result[i] is None]
        if not pending:
            return result  # type: ignore[return-value]
        fresh = cur.execute(_RESERVE_IDS, (len(pending),)).fetchone()[1]
        for i, new_id in zip(pending, fresh, strict=True):
            ids[i] = new_id
    raise RuntimeError("unique keys kept changing hands; giving up")


@contextmanager
def _cursor(conn: psycopg.Connection | None, dsn: str | None) -> Iterator[psycopg.Cursor]:
    """A cursor on the caller's connection, or on this process's cached one."""
    connection = conn if conn is not None else _cached_connection(resolve_dsn(dsn))
    try:
        with connection.cursor() as cur:
            yield cur
    except (pg_errors.UndefinedTable, pg_errors.InvalidSchemaName) as exc:
        origin = f", DSN from {dsn_source(dsn)}" if conn is None else ""
        raise SchemaMissing(
            f"the supervisor schema is missing in database {describe(connection.info.dsn)}"
            f"{origin}; run `supervisor migrate` ({exc.diag.message_primary})"
        ) from None


def _cached_connection(dsn: str) -> psycopg.Connection:
    key = (dsn, os.getpid())
    with _connections_lock:
        connection = _connections.get(key)
        if connection is None or connection.closed or connection.broken:
            connection = connect(dsn, application_name="supervisor-enqueue")
            if is_embedded(dsn):  # as in the CLI: the development database migrates itself
                migrate(connection)
            _connections[key] = connection
        return connection
