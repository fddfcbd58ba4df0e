"""Turning a producer's call into statements: the checks, and the statements as I/O-free
plans, so the sync and async APIs share one logic.

Every check raises ``TypeError``/``ValueError`` with one line naming the problem, before
the database is touched, so bad input never reaches it and nothing is half-written.

A plan is a generator that yields ``Execute`` (run a statement, send back all its rows)
or ``Copy`` (stream these COPY text-format chunks, send back None) and returns the
result. ``shared.enqueue`` drives plans on psycopg ``Connection``s, ``shared.producers.aio``
on ``AsyncConnection``s; neither knows the SQL.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple, final

import orjson

from shared import jobs
from shared.options import CallOptions, ManyOptions, resolved
from shared.producers.argsbuffer import ArgsBuffer
from shared.producers.concurrency import check_concurrency_key, check_concurrency_keys
from shared.producers.copyrows import copy_job_rows
from shared.reservations import reservation
from shared.tracing import current_trace_context
from shared.validation import MAX_KIND, MAX_QUEUE, MAX_UNIQUE_KEY, check_length, check_name

MAX_QUEUE_NAME = MAX_QUEUE  # the schema's CHECK; keeps the name inside a NOTIFY payload


def check_options(kind: Any, options: Mapping[str, Any]) -> None:
    """Refuse options the schema would refuse (or silently misread). ``options`` has
    every option (``shared.options.resolved``)."""
    queue, priority, max_attempts, timeout = (options["queue"], options["priority"],
                                              options["max_attempts"], options["timeout"])
    run_at, delay = options["run_at"], options["delay"]
    if not isinstance(kind, str) or not kind:
        raise TypeError(f"job kind must be a non-empty str, not {kind!r}")
    if not isinstance(queue, str) or not queue:
        raise ValueError(f"queue must be a str of 1 to {MAX_QUEUE_NAME} characters: {queue!r}")
    check_length("job kind", kind, MAX_KIND)
    check_length("queue", queue, MAX_QUEUE_NAME)
    if not _is_int(priority) or not -(2**31) <= priority < 2**31:
        raise TypeError(f"priority must be a 32-bit int, not {priority!r}")
    check_name("job kind", kind)
    check_name("queue", queue)
    if max_attempts is not None and (not _is_int(max_attempts)
                                     or not 1 <= max_attempts < 2**31):
        raise ValueError(f"max_attempts must be an int of at least 1, not {max_attempts!r}")
    if timeout is not None and (not _is_number(timeout) or not 0 < timeout < math.inf):
        raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
    reservation(options)
    if run_at is not None and delay is not None:
        raise ValueError("give either run_at or delay, not both")
    if run_at is not None and (not isinstance(run_at, datetime) or run_at.tzinfo is None):
        raise ValueError(f"run_at must be a timezone-aware datetime, not {run_at!r}")
    if delay is not None and (not _is_number(delay) or not 0 <= delay < math.inf):
        raise ValueError(f"delay must be a number of seconds >= 0, not {delay!r}")
    check_expiry(options.get("expires_in"), options.get("expires_at"))


def check_expiry(expires_in: Any, expires_at: Any) -> None:
    """A job's expiry: ``expires_in`` seconds (> 0) or a timezone-aware ``expires_at``
    still in the future (by this machine's clock), or neither."""
    if expires_in is not None and expires_at is not None:
        raise ValueError("give either expires_in or expires_at, not both")
    if expires_in is not None and (not _is_number(expires_in)
                                   or not 0 < expires_in < math.inf):
        raise ValueError(f"expires_in must be a number of seconds > 0, not {expires_in!r}")
    if expires_at is not None:
        if not isinstance(expires_at, datetime) or expires_at.tzinfo is None:
            raise ValueError(f"expires_at must be a timezone-aware datetime, not {expires_at!r}")
        if expires_at <= datetime.now(UTC):
            raise ValueError(f"expires_at {expires_at.isoformat()} is in the past: the job "
                             "would never run")


def expiry(options: Mapping[str, Any]) -> tuple[datetime | None, float | None]:
    """(expires_at, expires_in) as the statements take them: both None when the job
    never expires; the server adds expires_in to its own now()."""
    expires_in = options.get("expires_in")
    return options.get("expires_at"), None if expires_in is None else float(expires_in)


def no_concurrency_key_with(option: str, keys: object) -> None:
    """Refuse concurrency keys beside ``option`` (``then``, ``depends_on``), which the
    held and batch paths do not write yet."""
    if keys is not None:
        raise ValueError(f"concurrency keys cannot be combined with {option} yet")


def check_unique_key(key: Any) -> None:
    """A unique key is a non-empty str of at most ``MAX_UNIQUE_KEY`` characters, or None."""
    if key is not None and (not isinstance(key, str) or not key):
        raise TypeError(f"unique_key must be a non-empty str or None, not {key!r}")
    if key is not None:
        check_length("unique_key", key, MAX_UNIQUE_KEY)


def check_batch(
    args_list: Any, unique_key: str | None, unique_keys: Sequence[str | None] | None,
) -> list[str | None] | None:
    """The per-job keys of a batch (None when it has none), after checking their shape."""
    if not isinstance(args_list, Sequence) or isinstance(args_list, str | bytes | Mapping):
        raise TypeError("args_list must be a list of dicts, one per job")
    if unique_key is not None:
        if len(args_list) != 1 or unique_keys is not None:
            raise ValueError("unique_key names one job; pass unique_keys=[...] for a batch")
        unique_keys = [unique_key]
    if unique_keys is None:
        return None
    if len(unique_keys) != len(args_list):
        raise ValueError(f"unique_keys has {len(unique_keys)} entries for {len(args_list)} jobs")
    for key in unique_keys:
        check_unique_key(key)
    return list(unique_keys)


def encode_args(kind: str, args: Mapping[str, Any] | None) -> bytes:
    """``args`` as JSON object bytes, or a ``TypeError``/``ValueError`` that says why not."""
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


def encode_all(kind: str, args_list: Sequence[Mapping[str, Any] | None]) -> ArgsBuffer:
    """Every job's ``args`` encoded (and checked) like ``encode_args``, packed into one
    buffer: a bulk enqueue holds its JSON, not a 4 KB allocation per job."""
    packed = ArgsBuffer()
    for args in args_list:
        packed.append(encode_args(kind, args))
    return packed


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


_UNIQUE_CONFLICT_ROUNDS = 20  # a key's live job would have to finish 20 times in a row


class Execute(NamedTuple):
    """Run ``query`` with ``params``; the plan receives the rows as a list of tuples."""

    query: str
    params: Any


@final  # lets ``type(step) is Copy`` narrow both ways
class Copy(NamedTuple):
    """Run the COPY ``statement`` and write ``chunks`` (UTF-8 COPY text); receives None."""

    statement: str
    chunks: Iterator[bytes]


Plan = Generator[Execute | Copy, Any, Any]


@final  # lets ``type(x) is Row`` (the fast test) narrow both ways
class Row(NamedTuple):
    """The common job, due now and without a unique key: one plain INSERT, which
    concurrent callers may share a round trip for (``shared.producers.combine``)."""

    kind: str
    queue: str
    args: str
    priority: int
    max_attempts: int | None  # None: the handler's, resolved at claim
    timeout: float | None
    trace_context: str | None = None  # JSON text (shared.tracing); None: no span


def as_plan(planned: Row | Plan) -> Plan:
    """What ``plan_one`` returned, as a plan returning one id."""
    return _first(_insert_now(planned)) if type(planned) is Row else planned


def _first(plan: Plan) -> Plan:
    ids = yield from plan
    return ids[0]

_INSERT_ONE = """
INSERT INTO supervisor.jobs
    (kind, queue, args, state, priority, max_attempts, run_at, timeout, unique_key,
     trace_context, concurrency_key, expires_at, cpus, memory, resources)
SELECT %(kind)s, %(queue)s, %(args)s::jsonb,
       CASE WHEN t.run_at > now() THEN 'scheduled' ELSE 'available' END,
       %(priority)s, %(max_attempts)s, t.run_at, %(timeout)s, %(unique_key)s,
       %(trace_context)s::jsonb, %(concurrency_key)s,
       COALESCE(%(expires_at)s::timestamptz,
                now() + %(expires_in)s::float8 * interval '1 second'),
       %(cpus)s, %(memory)s, %(resources)s::jsonb
FROM (SELECT COALESCE(%(run_at)s::timestamptz,
                      now() + %(delay)s::float8 * interval '1 second') AS run_at) AS t
ON CONFLICT DO NOTHING
RETURNING id
"""

# The common case, no delay and no key: the column defaults do the rest, and the plan
# the server caches stays the simplest one.
INSERT_NOW = """
INSERT INTO supervisor.jobs (kind, queue, args, priority, max_attempts, timeout,
                             trace_context)
VALUES (%s, %s, %s::jsonb, %s, %s, %s, %s::jsonb)
RETURNING id
"""

# Several Rows in one statement (one round trip, one commit). The CTE is read twice, so
# PostgreSQL materialises it: each row's id is drawn once and comes back in the order of
# the arrays, so every caller gets its own job's id.
INSERT_ROWS = """
WITH r AS (
    SELECT nextval('supervisor.jobs_id_seq') AS id, u.*
    FROM unnest(%s::text[], %s::text[], %s::text[], %s::int[], %s::int[], %s::float8[],
                %s::text[])
         WITH ORDINALITY AS u(kind, queue, args, priority, max_attempts, timeout,
                              trace_context, n)
), ins AS (
    INSERT INTO supervisor.jobs (id, kind, queue, args, priority, max_attempts, timeout,
                                 trace_context)
    SELECT id, kind, queue, args::jsonb, priority, max_attempts, timeout,
           trace_context::jsonb FROM r
)
SELECT id FROM r ORDER BY n
"""

_LIVE_BY_KEYS = """
SELECT unique_key, id FROM supervisor.jobs
WHERE unique_key = ANY(%s::text[])
  AND state IN ('available', 'scheduled', 'running', 'retryable')
"""

# Ids are reserved up front so COPY (which returns nothing) can still report them. The
# server's clock decides whether a delayed job is scheduled, and the due time travels
# back as text in the session's own DateStyle, so no client-side datetime loader (an
# ORM's) can change it on the way.
RESERVE_IDS = """
SELECT t.due::text, t.due > now(),
       ARRAY(SELECT nextval('supervisor.jobs_id_seq') FROM generate_series(1, %s)),
       COALESCE(%s::timestamptz, now() + %s::float8 * interval '1 second')::text
FROM (SELECT COALESCE(%s::timestamptz, now() + %s::float8 * interval '1 second') AS due) AS t
"""

_INSERT_KEYED = """
INSERT INTO supervisor.jobs
    (id, kind, queue, args, state, priority, max_attempts, run_at, timeout, unique_key,
     trace_context, concurrency_key, expires_at, cpus, memory, resources)
SELECT u.id, %(kind)s, %(queue)s, u.args::jsonb, %(state)s, %(priority)s,
       %(max_attempts)s, %(run_at)s::timestamptz, %(timeout)s, u.unique_key,
       %(trace_context)s::jsonb, u.ckey, %(expires_at)s::timestamptz, %(cpus)s, %(memory)s,
       %(resources)s::jsonb
FROM unnest(%(ids)s::bigint[], %(args)s::text[], %(keys)s::text[], %(ckeys)s::text[])
     AS u(id, args, unique_key, ckey)
ON CONFLICT DO NOTHING
RETURNING id
"""


def plan_one(kind: str, args: Mapping[str, Any] | None, options: CallOptions) -> Row | Plan:
    """Check everything, then return the plan inserting one job (it returns the id), or
    the ``Row`` that is all the common case needs (``as_plan`` makes it a plan)."""
    o = resolved(options)
    check_options(kind, o)
    unique_key, concurrency_key = o["unique_key"], o["concurrency_key"]
    check_unique_key(unique_key)
    check_concurrency_key(concurrency_key)
    encoded = encode_args(kind, args).decode()
    trace_context = current_trace_context()
    expires_at, expires_in = expiry(o)
    needs = reservation(o)
    if (unique_key is None and o["run_at"] is None and not o["delay"]
            and concurrency_key is None and expires_at is None and expires_in is None
            and not needs.declared):
        return Row(kind, o["queue"], encoded, o["priority"], o["max_attempts"], o["timeout"],
                   trace_context)
    params = {
        "kind": kind, "queue": o["queue"], "args": encoded, "priority": o["priority"],
        "max_attempts": o["max_attempts"], "timeout": o["timeout"], "run_at": o["run_at"],
        "delay": float(o["delay"] or 0.0), "unique_key": unique_key,
        "trace_context": trace_context,
        "concurrency_key": concurrency_key,
        "expires_at": expires_at, "expires_in": expires_in,
        "cpus": needs.cpus, "memory": needs.memory, "resources": needs.resources_json(),
    }
    return _insert_one(params, unique_key)


def plan_many(kind: str, args_list: Sequence[Mapping[str, Any] | None],
              options: ManyOptions) -> Plan | None:
    """Check everything, then return the plan inserting the batch (it returns the ids in
    order), or None for an empty batch. ``concurrency_key`` gives every job that key,
    ``concurrency_keys`` one per job (None for none)."""
    o = resolved(options)
    check_options(kind, o)
    keys = check_batch(args_list, o["unique_key"], o["unique_keys"])
    ckeys = check_concurrency_keys(len(args_list), o["concurrency_key"], o["concurrency_keys"])
    encoded = encode_all(kind, args_list)
    if not encoded:
        return None
    common = {"kind": kind, "queue": o["queue"], "priority": o["priority"],
              "max_attempts": o["max_attempts"], "timeout": o["timeout"],
              "concurrency_keys": ckeys, "trace_context": current_trace_context()}
    needs = reservation(o)
    common |= {"cpus": needs.cpus, "memory": needs.memory,
               "resources": needs.resources_json()}
    return _insert_many(encoded, keys, common, o["run_at"], float(o["delay"] or 0.0),
                        expiry(o))


def insert_rows(rows: list[Row]) -> Plan:
    """The plan inserting several Rows in one statement; returns their ids in order."""
    if len(rows) == 1:
        return _insert_now(rows[0])
    return _insert_rows(rows)


def _insert_rows(rows: list[Row]) -> Plan:
    columns = [list(column) for column in zip(*rows, strict=True)]
    result = yield Execute(INSERT_ROWS, columns)
    return [row[0] for row in result]


def _insert_now(params: Row) -> Plan:
    rows = yield Execute(INSERT_NOW, params)
    return [rows[0][0]]


def _insert_one(params: dict[str, Any], unique_key: str | None) -> Plan:
    for _ in range(_UNIQUE_CONFLICT_ROUNDS):
        rows = yield Execute(_INSERT_ONE, params)
        if rows:
            return rows[0][0]
        # Conflict: a live job holds the key. It may finish before we look; retry then.
        rows = yield Execute(_LIVE_BY_KEYS, ([unique_key],))
        if rows:
            return rows[0][1]
    raise RuntimeError(f"unique_key {unique_key!r} kept changing hands; giving up")


def _insert_many(encoded: ArgsBuffer, keys: list[str | None] | None, common: dict,
                 run_at: datetime | None, delay: float,
                 expiry: tuple[datetime | None, float | None]) -> Plan:
    when = (*expiry, run_at, delay)
    [(due, scheduled, ids, expires)] = yield Execute(RESERVE_IDS, (len(encoded), *when))
    explicit_time = run_at is not None or delay > 0
    state = jobs.SCHEDULED if scheduled else jobs.AVAILABLE
    common = dict(common, expires_at=expires)  # one moment for the whole batch
    if keys is None:
        yield Copy(*copy_job_rows(ids, encoded, common, state, due if explicit_time else None))
        return ids
    params = dict(common, state=state, run_at=due)
    return (yield from _insert_keyed(ids, encoded, keys, params, when))


def _insert_keyed(ids: list[int], encoded: ArgsBuffer, keys: list[str | None],
                  common: dict, when: tuple) -> Plan:
    result: list[int | None] = [None] * len(ids)
    pending = list(range(len(ids)))
    for _ in range(_UNIQUE_CONFLICT_ROUNDS):
        ckeys = common.get("concurrency_keys")
        params = dict(common, ids=[ids[i] for i in pending],
                      args=[encoded[i].decode() for i in pending],
                      keys=[keys[i] for i in pending],
                      ckeys=[None if ckeys is None else ckeys[i] for i in pending])
        inserted = {row[0] for row in (yield Execute(_INSERT_KEYED, params))}
        for i in pending:
            if ids[i] in inserted:
                result[i] = ids[i]
        losers = [i for i in pending if result[i] is None]
        if not losers:
            return result
        live = dict((yield Execute(_LIVE_BY_KEYS, ([keys[i] for i in losers],))))
        for i in losers:
            result[i] = live.get(keys[i])
        # Keys whose live job finished between the insert and the look-up: try again
        # with fresh ids (a reserved id is never reused, even when its insert lost).
        pending = [i for i in losers if result[i] is None]
        if not pending:
            return result
        [(_, _, fresh, _)] = yield Execute(RESERVE_IDS, (len(pending), *when))
        for i, new_id in zip(pending, fresh, strict=True):
            ids[i] = new_id
    raise RuntimeError("unique keys kept changing hands; giving up")
