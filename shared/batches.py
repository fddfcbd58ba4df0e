"""Fan-out and fan-in: batches of jobs with a callback, and jobs that depend on others.

``enqueue_many(..., then=callback)`` stores a row in ``supervisor.batches`` and the
members (with ``batch_id``) in one transaction. The database closes the batch: a trigger
on ``supervisor.jobs`` (schema 0006) enqueues the callback in the transaction that makes
the last member final, under a per-batch lock, so it happens exactly once whatever the
supervisors do. ``depends_on`` holds a job back ('scheduled' at ``HOLD``, with one row
per unfinished dependency in ``supervisor.job_dependencies``, schema 0009) until the same
trigger has counted every dependency completed, or cancels it when one did not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Unpack

from shared import batches_actions, jobs
from shared.batches_actions import ActionResult, BatchActionRefused, check_budget
from shared.batcheta import forecast
from shared.batchstate import BatchSummary, Member, iter_results, summary
from shared.options import (
    JOB_OPTIONS,
    EnqueueOptions,
    JobOptions,
    ManyOptions,
    check_names,
    resolved,
)
from shared.producers import plans
from shared.producers.plans import Execute, Plan
from shared.reservations import reservation
from shared.tracing import current_trace_context
from shared.waiting import connect, wait_batch

__all__ = ["HOLD", "ActionResult", "Batch", "BatchActionRefused", "BatchSummary",
           "Callback", "Member", "check_callback", "check_depends_on", "find_batch",
           "iter_results", "plan_batch", "plan_dependent", "summary"]

# Where a held-back dependent waits: far, but finite (the parent subtracts now() from
# the earliest run_at, which PostgreSQL refuses for 'infinity').
HOLD = "9999-12-31 00:00:00+00"


@dataclass(frozen=True, init=False)
class Callback:
    """A job to enqueue when a batch closes: ``handle.bind(**args)``, or
    ``Callback(kind, args, queue=...)`` with any ``JobOptions``."""

    kind: str
    args: Mapping[str, Any]
    options: JobOptions

    def __init__(self, kind: str, args: Mapping[str, Any],
                 **options: Unpack[JobOptions]) -> None:
        check_names(options, JOB_OPTIONS, "Callback")
        if (options.get("cpus") is not None or options.get("memory") is not None
                or options.get("resources")):
            # The callback is inserted by the schema's trigger, which writes no reservation.
            raise ValueError("a batch callback cannot reserve cpus, memory or resources (yet)")
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "args", args)
        object.__setattr__(self, "options", options)


class Batch:
    """A batch enqueued by ``enqueue_many(..., then=...)`` or found by ``batch(id)``."""

    def __init__(self, batch_id: int, ids: list[int], dsn: str | None = None) -> None:
        self.id = batch_id
        self.ids = ids
        self.dsn = dsn

    def __repr__(self) -> str:
        return f"<Batch {self.id} of {len(self.ids)} jobs>"

    def summary(self) -> BatchSummary:
        """The counts now."""
        with connect(self.dsn) as conn:
            found = summary(conn, self.id)
        if found is None:
            raise LookupError(f"batch {self.id} does not exist")
        return found

    def eta(self) -> float | None:
        """Seconds until every member is done, forecast from measured run times and the
        children serving the batch's queues (``shared.batcheta``): 0 when none is
        left, None when it cannot be known (no run time measured yet, or no live
        supervisor serves the members left). One query."""
        with connect(self.dsn) as conn:
            found = forecast(conn, self.id)
        if found is None:
            raise LookupError(f"batch {self.id} does not exist")
        return found.eta

    def wait(self, timeout: float | None = None) -> BatchSummary:
        """Block until every member is final (and the callback enqueued); the summary
        (``.aborted`` and ``.reason`` when its failure budget stopped it).
        ``TimeoutError`` after ``timeout`` seconds."""
        return wait_batch(self.id, timeout, dsn=self.dsn)

    def _act(self, action: str, *args: Any) -> ActionResult:
        with connect(self.dsn) as conn:
            return getattr(batches_actions, action)(conn, self.id, *args)

    def cancel(self) -> ActionResult:
        """Cancel every member not finished: from the first commit none starts, running
        ones are told to stop, the callback is enqueued once with the summary. Done in
        chunks (``shared.batches_actions``). ``LookupError`` for no such batch,
        ``BatchActionRefused`` (one line, nothing changed) when it is finished."""
        return self._act("cancel")

    def retry_failed(self) -> ActionResult:
        """Run exactly the discarded members again; a finished batch opens again and
        its callback runs again once they are final."""
        return self._act("retry_failed")

    def pause(self) -> ActionResult:
        """No member starts until ``resume()``; running members finish."""
        return self._act("pause")

    def resume(self) -> ActionResult:
        """Undo ``pause()``: the held members are available at once."""
        return self._act("resume")

    def reprioritize(self, priority: int) -> ActionResult:
        """Give the members not started yet this priority (lower runs first)."""
        return self._act("reprioritize", priority)


def find_batch(batch_id: int, dsn: str | None = None) -> Batch:
    """A batch by id, from any process (``supervisor.batch``); ``LookupError`` if none."""
    if not isinstance(batch_id, int) or isinstance(batch_id, bool):
        raise TypeError(f"batch id must be an int, not {batch_id!r}")
    with connect(dsn) as conn:
        rows = conn.execute("SELECT id FROM supervisor.jobs WHERE batch_id = %s ORDER BY id",
                            (batch_id,)).fetchall()
        exists = conn.execute("SELECT 1 FROM supervisor.batches WHERE id = %s",
                              (batch_id,)).fetchone()
    if not exists:
        raise LookupError(f"batch {batch_id} does not exist")
    return Batch(batch_id, [row[0] for row in rows], dsn)


# -- producing ------------------------------------------------------------------------

_INSERT_BATCH = """
INSERT INTO supervisor.batches (total, callback_kind, callback_queue, callback_args,
                                callback_priority, callback_max_attempts, callback_timeout,
                                max_failures, max_failure_rate)
VALUES (%s, %s, %s, %s::jsonb, %s, %s, %s, %s, %s)
RETURNING id
"""


def check_callback(then: Any) -> Callback:
    """``then`` checked like any enqueue, before the database is touched."""
    if not isinstance(then, Callback):
        raise TypeError(f"then= must be a job's bind(...) (a Callback), not {then!r}")
    plans.check_options(then.kind, resolved(then.options))
    plans.encode_args(then.kind, then.args)
    return then


def plan_batch(kind: str, args_list: Sequence[Mapping[str, Any] | None], then: Any,
               options: ManyOptions, budget: tuple[int | None, float | None] = (None, None),
               ) -> Plan:
    """Check everything, then the plan storing the batch and its members (run it in one
    transaction); it returns ``(batch_id, ids)``. ``budget``: (max_failures,
    max_failure_rate), past which the batch is aborted (schema 0025)."""
    check_budget(*budget)
    o = resolved(options)
    plans.check_options(kind, o)
    if o["unique_keys"] is not None or o["unique_key"] is not None:
        raise ValueError("a batch cannot use unique keys: every member must be its own job")
    plans.check_batch(args_list, None, None)
    if not args_list:
        raise ValueError("a batch needs at least one job")
    callback = check_callback(then) if then is not None else None
    encoded = plans.encode_all(kind, args_list)
    needs = reservation(o)
    common = {"kind": kind, "queue": o["queue"], "priority": o["priority"],
              "max_attempts": o["max_attempts"], "timeout": o["timeout"],
              "trace_context": current_trace_context(), "cpus": needs.cpus,
              "memory": needs.memory, "resources": needs.resources_json()}
    # Members may expire (issue 28): an expired member is final for the batch as a
    # discarded one is (schema 0021), so the batch still closes and calls back.
    return _insert_batch(encoded, callback, common, o["run_at"], float(o["delay"] or 0.0),
                         plans.expiry(o), budget)


def _insert_batch(encoded: plans.ArgsBuffer, callback: Callback | None, common: dict[str, Any],
                  run_at: Any, delay: float,
                  expiry: tuple[Any, float | None] = (None, None),
                  budget: tuple[int | None, float | None] = (None, None)) -> Plan:
    cb = resolved(callback.options) if callback else None
    cb_args = plans.encode_args(callback.kind, callback.args).decode() if callback else None
    [(batch_id,)] = yield Execute(_INSERT_BATCH, (
        len(encoded), callback and callback.kind, cb and cb["queue"], cb_args,
        cb["priority"] if cb else 0, cb and cb["max_attempts"], cb and cb["timeout"],
        budget[0], None if budget[1] is None else float(budget[1])))
    ids = yield from plans._insert_many(encoded, None, dict(common, batch_id=batch_id),
                                        run_at, delay, expiry)
    return batch_id, ids


# Read without a lock: a producer's transaction may stay open for minutes, and a lock on
# a dependency's row would stop its supervisor from completing it or renewing its lease
# meanwhile. A dependency that becomes final before our commit is settled by the
# deferred trigger of schema 0009, under a lock held only while we commit.
_DEPENDENCY_STATES = "SELECT id, state FROM supervisor.jobs WHERE id = ANY(%s::bigint[])"

_INSERT_DEPENDENT = """
INSERT INTO supervisor.jobs (kind, queue, args, state, priority, max_attempts, timeout,
                             depends_on, run_at, finished_at, errors, trace_context,
                             expires_at)
VALUES (%(kind)s, %(queue)s, %(args)s::jsonb, %(state)s, %(priority)s, %(max_attempts)s,
        %(timeout)s, %(deps)s::bigint[],
        CASE WHEN %(state)s = 'scheduled' THEN %(hold)s::timestamptz ELSE now() END,
        CASE WHEN %(state)s = 'cancelled' THEN now() END,
        CASE WHEN %(message)s::text IS NULL THEN '[]'::jsonb
             ELSE jsonb_build_array(jsonb_build_object('attempt', 0, 'kind', 'dependency',
                  'message', %(message)s::text, 'traceback', NULL, 'at', now(),
                  'supervisor', NULL)) END,
        %(trace_context)s::jsonb,
        COALESCE(%(expires_at)s::timestamptz,
                 now() + %(expires_in)s::float8 * interval '1 second'))
RETURNING id
"""


def check_depends_on(depends_on: Any) -> list[int]:
    """A non-empty list of job ids."""
    if isinstance(depends_on, int | str | bytes) or not isinstance(depends_on, Sequence):
        raise TypeError(f"depends_on must be a list of job ids, not {depends_on!r}")
    ids = list(depends_on)
    if not ids or not all(isinstance(i, int) and not isinstance(i, bool) and i > 0
                          for i in ids):
        raise ValueError(f"depends_on must be a non-empty list of job ids, not {depends_on!r}")
    return sorted(set(ids))


def plan_dependent(kind: str, args: Mapping[str, Any] | None,
                   options: EnqueueOptions) -> Plan:
    """Check everything, then the plan inserting a job held until every job of
    ``options["depends_on"]`` completed (run it in one transaction); it returns the id."""
    o = resolved(options)
    plans.check_options(kind, o)
    if o["run_at"] is not None or o["delay"] is not None or o["unique_key"] is not None:
        raise ValueError("depends_on cannot be combined with run_at, delay or unique_key")
    if reservation(o).declared:
        raise ValueError("depends_on cannot be combined with cpus, memory or resources (yet)")
    deps = check_depends_on(o["depends_on"])
    params = {"kind": kind, "queue": o["queue"],
              "args": plans.encode_args(kind, args).decode(), "priority": o["priority"],
              "max_attempts": o["max_attempts"], "timeout": o["timeout"],
              "deps": deps, "hold": HOLD, "trace_context": current_trace_context()}
    # A held job may expire (issue 28): not started by then, even if its dependencies
    # are still running, it ends expired and its own dependents are cancelled (0021).
    params["expires_at"], params["expires_in"] = plans.expiry(o)
    return _insert_dependent(params)


_HOLD_DEPENDENT = """
WITH edges AS (
    INSERT INTO supervisor.job_dependencies (dependency_id, dependent_id)
    SELECT unnest(%(pending)s::bigint[]), %(id)s)
INSERT INTO supervisor.dependents (id, pending) VALUES (%(id)s, cardinality(%(pending)s))
RETURNING id
"""


def _insert_dependent(params: dict[str, Any]) -> Plan:
    states = dict((yield Execute(_DEPENDENCY_STATES, (params["deps"],))))
    missing = [i for i in params["deps"] if i not in states]
    if missing:
        raise ValueError(f"depends_on: no job {missing[0]}")
    failed = [(i, s) for i, s in sorted(states.items()) if s in jobs.FAILED_FINAL_STATES]
    pending = [i for i, s in sorted(states.items()) if s != jobs.COMPLETED]
    if failed:
        state, message = jobs.CANCELLED, f"dependency {failed[0][0]} ended {failed[0][1]}"
    elif not pending:
        state, message = jobs.AVAILABLE, None
    else:
        state, message = jobs.SCHEDULED, None
    [(job_id,)] = yield Execute(_INSERT_DEPENDENT, dict(params, state=state, message=message))
    if state == jobs.SCHEDULED:
        # One edge per dependency still to complete; the deferred trigger settles them
        # at our commit (see above).
        yield Execute(_HOLD_DEPENDENT, {"id": job_id, "pending": pending})
    return job_id
