"""Writing jobs held for their dependencies: one (``plan_dependent``) or many by COPY
(``plan_many_dependents``, ``plan_held_many`` for a batch's members), each with one
edge per dependency still to end in ``supervisor.job_dependencies`` and a counter in
``supervisor.dependents`` (schema 0009; ``allow_failure`` per edge, 0028). What an edge
is and how a dependent reads its dependencies is ``shared.dependencies``'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from shared import jobs
from shared.dependencies import HOLD, Edges, check_depends_on
from shared.options import EnqueueOptions, ManyOptions, resolved
from shared.producers import plans
from shared.producers.argsbuffer import ArgsBuffer
from shared.producers.copyrows import copy_job_rows
from shared.producers.plans import Copy, Execute, Plan
from shared.reservations import reservation
from shared.tracing import current_trace_context

__all__ = ["plan_dependent", "plan_held_many", "plan_many_dependents"]


def _check_held(o: dict[str, Any]) -> Edges:
    if o["run_at"] is not None or o["delay"] is not None or o["unique_key"] is not None:
        raise ValueError("depends_on cannot be combined with run_at, delay or unique_key")
    if o.get("unique_keys") is not None:
        raise ValueError("depends_on cannot be combined with unique_keys")
    if reservation(o).declared:
        raise ValueError("depends_on cannot be combined with cpus, memory or resources (yet)")
    return check_depends_on(o["depends_on"])


# -- one job ----------------------------------------------------------------------------

# Read without a lock: a producer's transaction may stay open for minutes, and a lock on
# a dependency's row would stop its supervisor from completing it or renewing its lease
# meanwhile. A dependency that becomes final before our commit is settled by the
# deferred trigger of schema 0009, under a lock held only while we commit.
_DEPENDENCY_STATES = "SELECT id, state FROM supervisor.jobs WHERE id = ANY(%s::bigint[])"

_INSERT_DEPENDENT = """
INSERT INTO supervisor.jobs (kind, queue, args, state, priority, max_attempts, timeout,
                             depends_on, dependency_names, run_at, finished_at, errors,
                             trace_context, expires_at)
VALUES (%(kind)s, %(queue)s, %(args)s::jsonb, %(state)s, %(priority)s, %(max_attempts)s,
        %(timeout)s, %(deps)s::bigint[], %(names)s::jsonb,
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

# One edge per dependency still to end, and the held jobs' counters. The deferred
# trigger of 0009 settles them at the producer's commit.
_HOLD = """
WITH edges AS (
    INSERT INTO supervisor.job_dependencies (dependency_id, dependent_id, allow_failure)
    SELECT d.id, h.id, d.id = ANY(%(allowed)s::bigint[])
    FROM unnest(%(pending)s::bigint[]) AS d(id) CROSS JOIN unnest(%(held)s::bigint[]) AS h(id)),
held AS (
    INSERT INTO supervisor.dependents (id, pending)
    SELECT h.id, cardinality(%(pending)s::bigint[]) FROM unnest(%(held)s::bigint[]) AS h(id)
    RETURNING id)
SELECT count(*) FROM held
"""


def plan_dependent(kind: str, args: Mapping[str, Any] | None,
                   options: EnqueueOptions) -> Plan:
    """Check everything, then the plan inserting a job held until every job of
    ``options["depends_on"]`` ended as its edge asks (run it in one transaction); it
    returns the id."""
    o = resolved(options)
    plans.check_options(kind, o)
    edges = _check_held(o)
    params = {"kind": kind, "queue": o["queue"],
              "args": plans.encode_args(kind, args).decode(), "priority": o["priority"],
              "max_attempts": o["max_attempts"], "timeout": o["timeout"],
              "deps": edges.ids, "names": edges.names_json, "hold": HOLD,
              "trace_context": current_trace_context()}
    # A held job may expire (issue 28): not started by then, even if its dependencies
    # are still running, it ends expired and its own dependents are cancelled (0021).
    params["expires_at"], params["expires_in"] = plans.expiry(o)
    return _insert_dependent(params, edges)


def _states(edges: Edges) -> Plan:
    """The dependencies' states now; ``ValueError`` (the transaction rolls back) for an
    id that names no job."""
    states = dict((yield Execute(_DEPENDENCY_STATES, (edges.ids,))))
    missing = [i for i in edges.ids if i not in states]
    if missing:
        raise ValueError(f"depends_on: no job {missing[0]}")
    return states


def _insert_dependent(params: dict[str, Any], edges: Edges) -> Plan:
    states = yield from _states(edges)
    failed = [(i, s) for i, s in sorted(states.items())
              if s in jobs.FAILED_FINAL_STATES and i not in edges.allowed]
    pending = [i for i, s in sorted(states.items()) if s not in jobs.FINISHED_STATES]
    if failed:
        state, message = jobs.CANCELLED, f"dependency {failed[0][0]} ended {failed[0][1]}"
    elif not pending:
        state, message = jobs.AVAILABLE, None
    else:
        state, message = jobs.SCHEDULED, None
    [(job_id,)] = yield Execute(_INSERT_DEPENDENT, dict(params, state=state, message=message))
    if state == jobs.SCHEDULED:
        yield Execute(_HOLD, {"pending": pending, "held": [job_id],
                              "allowed": sorted(edges.allowed)})
    return job_id


# -- many jobs --------------------------------------------------------------------------

def plan_many_dependents(kind: str, args_list: Sequence[Mapping[str, Any] | None],
                         options: ManyOptions) -> Plan | None:
    """Check everything, then the plan inserting one job per ``args_list`` entry, each
    held until the jobs of ``options["depends_on"]`` ended as their edges ask (run it in
    one transaction; it returns the ids), or None for no job."""
    o = resolved(options)
    plans.check_options(kind, o)
    edges = _check_held(o)
    plans.check_batch(args_list, None, None)
    encoded = plans.encode_all(kind, args_list)
    if not encoded:
        return None
    common = {"kind": kind, "queue": o["queue"], "priority": o["priority"],
              "max_attempts": o["max_attempts"], "timeout": o["timeout"],
              "trace_context": current_trace_context()}
    return plan_held_many(encoded, common, edges, plans.expiry(o))


def plan_held_many(encoded: ArgsBuffer, common: dict[str, Any], edges: Edges,
                   expiry: tuple[Any, float | None]) -> Plan:
    """The plan inserting ``encoded`` jobs (COPY) that all wait for ``edges``; returns
    their ids. ``common`` as ``shared.producers.copyrows.copy_job_rows`` takes it. Every
    member is held while a dependency has not ended; one that already failed (without
    ``allow_failure``) cancels them at the producer's commit (0009's settlement), an
    update, so a batch of such members still closes and calls back."""
    states = yield from _states(edges)
    pending = [i for i, s in sorted(states.items()) if s != jobs.COMPLETED]
    if pending and all(states[i] in jobs.FINISHED_STATES and i in edges.allowed
                       for i in pending):
        pending = []
    [(_, _, ids, expires)] = yield Execute(plans.RESERVE_IDS,
                                           (len(encoded), *expiry, None, 0.0))
    common = dict(common, expires_at=expires, depends_on=edges.ids,
                  dependency_names=edges.names_json)
    if not pending:
        yield Copy(*copy_job_rows(ids, encoded, common, jobs.AVAILABLE, None))
        return ids
    yield Copy(*copy_job_rows(ids, encoded, common, jobs.SCHEDULED, HOLD))
    yield Execute(_HOLD, {"pending": pending, "held": ids, "allowed": sorted(edges.allowed)})
    return ids


