"""Fan-out and fan-in: batches of jobs with a callback, and jobs that depend on others.

``enqueue_many(..., then=callback)`` stores a row in ``supervisor.batches`` and the
members (with ``batch_id``) in one transaction. The database closes the batch: a trigger
on ``supervisor.jobs`` (schema 0006) enqueues the callback in the transaction that makes
the last member final, under a per-batch lock, so it happens exactly once whatever the
supervisors do. With an error callback (``on_failure=``, schema 0028) the batch's
outcome picks one: ``on_failure`` when a member did not complete or the batch was
stopped, else ``then``. Members may wait for dependencies like any job
(``shared.dependencies``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Unpack

import orjson

from shared import batches_actions
from shared.batches_actions import ActionResult, BatchActionRefused, check_budget
from shared.batcheta import forecast
from shared.batchstate import BatchSummary, Member, iter_results, summary
from shared.costs import batch_cost
from shared.dependencies import HOLD, Edges, check_depends_on
from shared.options import (
    JOB_OPTIONS,
    JobOptions,
    ManyOptions,
    check_names,
    resolved,
)
from shared.producers import plans
from shared.producers.held import plan_dependent, plan_held_many
from shared.producers.plans import Execute, Plan
from shared.reservations import reservation
from shared.tracing import current_trace_context
from shared.waiting import connect, wait_batch

# HOLD, check_depends_on and plan_dependent live in shared.dependencies; they are
# named here too for the callers that found them here before.
__all__ = ["HOLD", "ActionResult", "Batch", "BatchActionRefused", "BatchSummary",
           "Callback", "Member", "check_callback", "check_depends_on", "find_batch",
           "iter_results", "plan_batch", "plan_dependent", "summary"]


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
        """The counts now, and what its members cost so far (``.cost``: CPU-seconds,
        wall-seconds, peak memory p95 and max, attempts, retries; ``shared.costs``)."""
        with connect(self.dsn) as conn:
            found = summary(conn, self.id)
            if found is None:
                raise LookupError(f"batch {self.id} does not exist")
            return replace(found, cost=batch_cost(conn, self.id))

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
        """Cancel every member not finished: from the first commit none is claimed;
        running ones, and those already queued to a child, are cancelled in that commit
        and their supervisors told with it (one a child reaches before the notice
        arrives starts, milliseconds, and is interrupted); the callback is enqueued once
        with the summary. Done in chunks (``shared.batches_actions``). ``LookupError``
        for no such batch, ``BatchActionRefused`` (one line, nothing changed) when it is
        finished."""
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
                                max_failures, max_failure_rate, on_failure)
VALUES (%s, %s, %s, %s::jsonb, %s, %s, %s, %s, %s, %s::jsonb)
RETURNING id
"""


def check_callback(then: Any, what: str = "then") -> Callback:
    """``then`` (or ``on_failure``) checked like any enqueue, before the database is
    touched."""
    if not isinstance(then, Callback):
        raise TypeError(f"{what}= must be a job's bind(...) (a Callback), not {then!r}")
    plans.check_options(then.kind, resolved(then.options))
    plans.encode_args(then.kind, then.args)
    return then


def plan_batch(kind: str, args_list: Sequence[Mapping[str, Any] | None], then: Any,
               options: ManyOptions, budget: tuple[int | None, float | None] = (None, None),
               on_failure: Any = None) -> Plan:
    """Check everything, then the plan storing the batch and its members (run it in one
    transaction); it returns ``(batch_id, ids)``. ``budget``: (max_failures,
    max_failure_rate), past which the batch is aborted (schema 0025). ``on_failure``:
    the error callback, enqueued instead of ``then`` when a member did not complete or
    the batch was stopped (schema 0028). ``options["depends_on"]``: every member waits
    for those jobs (``shared.dependencies``)."""
    check_budget(*budget)
    o = resolved(options)
    plans.check_options(kind, o)
    if o["unique_keys"] is not None or o["unique_key"] is not None:
        raise ValueError("a batch cannot use unique keys: every member must be its own job")
    edges = None
    if o["depends_on"] is not None:
        if o["run_at"] is not None or o["delay"] is not None:
            raise ValueError("depends_on cannot be combined with run_at or delay")
        edges = check_depends_on(o["depends_on"])
    plans.check_batch(args_list, None, None)
    if not args_list:
        raise ValueError("a batch needs at least one job")
    callback = check_callback(then) if then is not None else None
    failure = check_callback(on_failure, "on_failure") if on_failure is not None else None
    if callback is None and failure is None:
        raise ValueError("a batch needs then= or on_failure= (a handle's bind(...))")
    encoded = plans.encode_all(kind, args_list)
    needs = reservation(o)
    if edges is not None and needs.declared:
        raise ValueError("depends_on cannot be combined with cpus, memory or resources (yet)")
    common = {"kind": kind, "queue": o["queue"], "priority": o["priority"],
              "max_attempts": o["max_attempts"], "timeout": o["timeout"],
              "trace_context": current_trace_context(), "cpus": needs.cpus,
              "memory": needs.memory, "resources": needs.resources_json()}
    # Members may expire (issue 28): an expired member is final for the batch as a
    # discarded one is (schema 0021), so the batch still closes and calls back.
    return _insert_batch(encoded, (callback, failure), common, o["run_at"],
                         float(o["delay"] or 0.0), plans.expiry(o), budget, edges)


def _callback_json(callback: Callback) -> str:
    """The error callback as ``batches.on_failure`` stores it (schema 0028)."""
    o = resolved(callback.options)
    return orjson.dumps({"kind": callback.kind, "queue": o["queue"],
                         "args": orjson.loads(plans.encode_args(callback.kind, callback.args)),
                         "priority": o["priority"], "max_attempts": o["max_attempts"],
                         "timeout": o["timeout"]}).decode()


def _insert_batch(encoded: plans.ArgsBuffer,
                  callbacks: tuple[Callback | None, Callback | None], common: dict[str, Any],
                  run_at: Any, delay: float,
                  expiry: tuple[Any, float | None] = (None, None),
                  budget: tuple[int | None, float | None] = (None, None),
                  edges: Edges | None = None) -> Plan:
    callback, failure = callbacks
    cb = resolved(callback.options) if callback else None
    cb_args = plans.encode_args(callback.kind, callback.args).decode() if callback else None
    [(batch_id,)] = yield Execute(_INSERT_BATCH, (
        len(encoded), callback and callback.kind, cb and cb["queue"], cb_args,
        cb["priority"] if cb else 0, cb and cb["max_attempts"], cb and cb["timeout"],
        budget[0], None if budget[1] is None else float(budget[1]),
        failure and _callback_json(failure)))
    members = dict(common, batch_id=batch_id)
    if edges is not None:
        ids = yield from plan_held_many(encoded, members, edges, expiry)
    else:
        ids = yield from plans._insert_many(encoded, None, members, run_at, delay, expiry)
    return batch_id, ids
