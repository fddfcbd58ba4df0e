"""The operator's view of the queue: ``status`` (queues, supervisors, work nobody
serves) and the queue switches (pause, resume).

Plain functions over an autocommit psycopg connection, returning plain data (dicts and
lists, JSON-ready) that ``supervisor status`` and the dashboard format, each its own way.
Job actions (list, show, retry, cancel) are in ``jobs``, global limits in ``limits``.

The jobs in flight are counted through the partial indexes of their states
(``shared.live_sql``), at what is in flight. The finished ones are most of the table
(kept for the retention), so they are counted apart (``finished_counts``), within a time
budget, and a caller that refreshes often (the dashboard) counts them less often.
Completions in the last minute and the oldest waiting job come from the partial indexes
of finished and available jobs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import psycopg

from shared import defaults
from shared.batches import HOLD
from shared.jobs import FINISHED_STATES
from shared.live_sql import live_jobs
from supervisor.admin.limits import all_limits
from supervisor.admin.refusals import check_queue_name
from supervisor.admin.resources import paused_kinds, waiting_for_resources

# A supervisor beats once a maintenance round (MAINTENANCE_INTERVAL, 5 s). Three rounds
# without a beat and it is presumed dead: shown apart, with when it was last seen, and
# no longer counted as serving its queues. (It counted as alive for 60 s, the time
# maintenance keeps a silent row: a SIGKILLed supervisor showed "1/2 busy" all along.)
LIVE_AFTER_SECONDS = 3 * defaults.MAINTENANCE_INTERVAL
RATE_WINDOW_SECONDS = 60.0
# The counts a queue shows, in a job's life order: "claimed" (taken by a supervisor,
# not started yet) apart from "running" (started), so running never exceeds children.
COUNTED = ("available", "scheduled", "claimed", "running", "retryable", "completed",
           "discarded", "cancelled", "expired")


# The jobs in flight, one arm per partial index: as one ``state = ANY(...)`` no index
# predicate matched it and, without the optional index of docs/dashboard.md, every
# dashboard refresh and /metrics scrape read the whole table (issue 40).
_LIVE_COUNTS = f"""
SELECT queue, state, count(*) FROM ({live_jobs("queue, state")}) AS live
GROUP BY queue, state
"""

# The finished ones come from jobs_state_queue_idx without reading rows (an index-only
# scan) where the operator created it (docs/dashboard.md, "Indexes for big tables"),
# else from the table; either way the cost follows the retention.
_FINISHED_COUNTS = """
SELECT queue, state, count(*) FROM supervisor.jobs
WHERE state = ANY(%(states)s::text[])
GROUP BY queue, state
"""

# Counting the finished jobs reads every one of them: `supervisor status` took 2.0 s on
# 20 million rows here without the index (scripts/bench/status_scale.py), and a week at
# 1,000 jobs/s is 600 million. Past the budget the count is cancelled and reported as
# not taken, never waited for nor made up.
FINISHED_COUNT_BUDGET = 2.0  # seconds
# A caller that counts again and again (status --watch, the dashboard) lets a count rest
# this share's inverse times as long as it took: at most a tenth of a backend counting.
FINISHED_COUNT_SHARE = 0.1

# The planner's row count of supervisor.jobs and its archives (as of their last
# ANALYZE): what the operator is told when the finished jobs were too many to count in
# the budget.
_ESTIMATED_ROWS = """
SELECT coalesce(sum(greatest(c.reltuples, 0)), 0)::bigint FROM pg_class c
WHERE c.oid = 'supervisor.jobs'::regclass
   OR c.oid IN (SELECT i.inhrelid FROM pg_inherits i
                WHERE i.inhparent = 'supervisor.jobs'::regclass)
"""

# Claimed but not started: a supervisor took the job and has not yet handed it to a
# child (attempted_at is set at the start). Only running rows are read.
_CLAIMED = """
SELECT queue, count(*) FROM supervisor.jobs
WHERE state = 'running' AND attempted_at IS NULL
GROUP BY queue
"""

# Scheduled jobs held back until their dependencies complete wait at run_at =
# shared.batches.HOLD (year 9999), read through the index on run_at from there.
_HELD = """
SELECT queue, count(*)::int FROM supervisor.jobs
WHERE state = 'scheduled' AND run_at >= %(hold)s::timestamptz
GROUP BY queue
"""

_RECENT_COMPLETIONS = """
SELECT queue, count(*) FROM supervisor.jobs
WHERE state = 'completed' AND finished_at > now() - %(window)s * interval '1 second'
GROUP BY queue
"""

_OLDEST_AVAILABLE = """
SELECT queue, extract(epoch FROM now() - min(run_at))::float8 FROM supervisor.jobs
WHERE state = 'available'
GROUP BY queue
"""

_QUEUE_ROWS = "SELECT name, paused, stop_running FROM supervisor.queues"

# For the drain forecast: each queue's mean run time over the last hour of the
# per-minute history (a few hundred rows of job_minutes through its key), and the
# children of the live supervisors serving it (the registry, a few rows).
_RUN_MEANS = """
SELECT queue, (sum(run_sum) / nullif(sum(run_n), 0))::float8 FROM supervisor.job_minutes
WHERE minute > now() - %(window)s * interval '1 second'
GROUP BY queue
"""
_SERVING = """
SELECT q.name, sum(s.children)::int FROM supervisor.supervisors s, unnest(s.queues) AS q(name)
WHERE s.heartbeat_at > now() - %(live)s * interval '1 second'
GROUP BY q.name
"""
RUN_TIME_WINDOW_SECONDS = 3600.0

_LIVE_SUPERVISORS = """
SELECT id, host, pid, started_at, heartbeat_at, queues, children, busy, info,
       extract(epoch FROM now() - heartbeat_at)::float8 AS heartbeat_age,
       extract(epoch FROM now() - started_at)::float8 AS uptime
FROM supervisor.supervisors
WHERE heartbeat_at > now() - %(live)s * interval '1 second'
ORDER BY host, pid, id
"""

_STALE_SUPERVISORS = """
SELECT count(*) FROM supervisor.supervisors
WHERE heartbeat_at <= now() - %(live)s * interval '1 second'
"""

# Presumed dead, still in the registry: what each last said, and the jobs it still
# holds (through the partial index of running jobs) with when their leases run out.
_SILENT_SUPERVISORS = """
SELECT s.id, s.host, s.pid, s.queues, s.children, s.busy,
       extract(epoch FROM now() - s.heartbeat_at)::float8 AS heartbeat_age,
       count(j.id)::int AS jobs_held,
       extract(epoch FROM max(j.lease_expires_at) - now())::float8 AS leases_expire_in
FROM supervisor.supervisors s
LEFT JOIN supervisor.jobs j ON j.state = 'running' AND j.lease_owner = s.id
     AND j.lease_expires_at IS NOT NULL
WHERE s.heartbeat_at <= now() - %(live)s * interval '1 second'
GROUP BY s.id
ORDER BY s.host, s.pid, s.id
"""

# Only asked when some live supervisor publishes its kinds (info.kinds): the distinct
# kinds waiting in the given queues, read through the partial index of available jobs.
_AVAILABLE_KINDS = """
SELECT DISTINCT queue, kind FROM supervisor.jobs
WHERE state = 'available' AND queue = ANY(%(queues)s::text[])
"""

# stop_running (0021): set by a pause with --stop-running, kept by a plain pause of a
# queue paused with it already, cleared by a resume.
_SET_PAUSED = """
INSERT INTO supervisor.queues AS q (name, paused, stop_running, updated_at)
VALUES (%(name)s, %(paused)s, %(stop_running)s, now())
ON CONFLICT (name) DO UPDATE
SET paused = EXCLUDED.paused, updated_at = now(),
    stop_running = EXCLUDED.paused AND (EXCLUDED.stop_running OR q.paused AND q.stop_running)
RETURNING (SELECT p.paused FROM supervisor.queues p WHERE p.name = %(name)s),
          (SELECT count(*) FROM supervisor.jobs j
           WHERE j.state = 'running' AND j.queue = %(name)s)
"""

_WAITING_IN_QUEUE = """
SELECT count(*) FROM supervisor.jobs WHERE state = 'available' AND queue = %(name)s
"""


@dataclass(frozen=True)
class FinishedTally:
    """The finished jobs (completed, discarded, cancelled, expired) by queue, or the
    fact that they were not counted. ``by_queue``: ``{queue: {state: n}}``; ``counted``:
    False when counting passed its budget (``by_queue`` is then empty and
    ``estimated_rows`` is the planner's row count of the whole table)."""

    by_queue: dict[str, dict[str, int]]
    counted: bool = True
    budget: float | None = None
    estimated_rows: int | None = None


def finished_counts(conn: psycopg.Connection,
                    budget: float | None = FINISHED_COUNT_BUDGET) -> FinishedTally:
    """Completed, discarded, cancelled and expired jobs by queue. Reads every finished
    job (or the optional state index's finished part), so its cost grows with the
    retention: cancelled past ``budget`` seconds (None: no budget). ``conn`` is in
    autocommit (the count is a transaction of its own)."""
    counts: dict[str, dict[str, int]] = {}
    try:
        with conn.transaction():
            if budget is not None:
                conn.execute(f"SET LOCAL statement_timeout = {max(1, round(budget * 1000))}")
            rows = conn.execute(_FINISHED_COUNTS,
                                {"states": list(FINISHED_STATES)}).fetchall()
    except psycopg.errors.QueryCanceled:
        row = conn.execute(_ESTIMATED_ROWS).fetchone()
        return FinishedTally({}, counted=False, budget=budget,
                             estimated_rows=row[0] if row else None)
    for queue, state, total in rows:
        counts.setdefault(queue, {})[state] = total
    return FinishedTally(counts, budget=budget)


def queue_stats(conn: psycopg.Connection,
                finished: FinishedTally | None = None) -> list[dict[str, Any]]:
    """Every queue that has jobs in flight, finished jobs counted in ``finished`` or a
    row in ``supervisor.queues``, sorted by name: its
    counts by state (``running`` counts started jobs only; ``claimed`` those a
    supervisor took but has not started yet; the finished states None when ``finished``
    was not counted), ``rate`` (jobs completed per second over
    the last minute), ``oldest_available`` (seconds since the oldest available job's
    run_at, or None), ``paused``, ``stop_running`` (paused with ``--stop-running``),
    ``limits`` (global limits, see
    ``limits.all_limits``; None), ``waiting_for_dependencies`` (of its scheduled jobs,
    those held until their dependencies complete, not for a time). ``finished`` gives
    the finished states' counts (see ``finished_counts``) counted earlier; without it
    they are counted now, within ``FINISHED_COUNT_BUDGET``."""
    queues: dict[str, dict[str, Any]] = {}

    def entry(name: str) -> dict[str, Any]:
        if name not in queues:
            queues[name] = {"name": name, "paused": False, "stop_running": False,
                            "counts": dict.fromkeys(COUNTED, 0),
                            "rate": 0.0, "oldest_available": None, "limits": None,
                            "waiting_for_dependencies": 0}
        return queues[name]

    if finished is None:
        finished = finished_counts(conn)
    for queue, state, total in conn.execute(_LIVE_COUNTS):
        entry(queue)["counts"][state] = total
    for queue, by_state in finished.by_queue.items():
        entry(queue)["counts"].update(by_state)
    for queue, claimed in conn.execute(_CLAIMED):
        counts = entry(queue)["counts"]
        counts["claimed"] = min(claimed, counts["running"])
        counts["running"] -= counts["claimed"]
    for queue, held in conn.execute(_HELD, {"hold": HOLD}):
        entry(queue)["waiting_for_dependencies"] = held
    for queue, recent in conn.execute(_RECENT_COMPLETIONS, {"window": RATE_WINDOW_SECONDS}):
        entry(queue)["rate"] = recent / RATE_WINDOW_SECONDS
    for queue, oldest in conn.execute(_OLDEST_AVAILABLE):
        if oldest is not None:
            entry(queue)["oldest_available"] = max(oldest, 0.0)  # run_at may be a hair ahead
    for name, paused, stop_running in conn.execute(_QUEUE_ROWS):
        entry(name)["paused"] = paused
        entry(name)["stop_running"] = paused and stop_running
    for name, limits in all_limits(conn).items():  # supervisor queues limit
        entry(name)["limits"] = limits
    run_means: dict[str, float | None] = dict(
        conn.execute(_RUN_MEANS, {"window": RUN_TIME_WINDOW_SECONDS}).fetchall())
    serving: dict[str, int] = dict(
        conn.execute(_SERVING, {"live": LIVE_AFTER_SECONDS}).fetchall())
    for name, item in queues.items():
        if not finished.counted:
            item["counts"].update(dict.fromkeys(FINISHED_STATES, None))
        item["run_mean"] = run_means.get(name)
        item["serving"] = _slots(serving.get(name, 0), item["limits"])
        item["drain_seconds"] = drain_seconds(item)
    return [queues[name] for name in sorted(queues)]


def _slots(children: int, limits: dict[str, Any] | None) -> int:
    # A global max_running caps what the queue can run at once, whatever serves it.
    cap = (limits or {}).get("max_running")
    return min(children, cap) if isinstance(cap, int) else children


def drain_seconds(queue: dict[str, Any]) -> float | None:
    """When ``queue``'s work (available, claimed and running jobs) would be done: that
    many jobs times the queue's mean run time over the last hour (``run_mean``),
    divided by the children of live supervisors serving it (``serving``, capped by its
    global ``max_running``). Without a measured run time, the available jobs at the
    last minute's pace of completions. 0 when nothing is left; None when it cannot be
    known: jobs wait and nothing measured, or the queue is paused or nobody serves it
    (then it never drains)."""
    counts = queue["counts"]
    todo = counts["available"] + counts["claimed"] + counts["running"]
    if not todo:
        return 0.0
    if queue["paused"] and counts["available"]:
        return None
    if queue.get("run_mean") is not None and queue.get("serving"):
        return todo * queue["run_mean"] / min(queue["serving"], todo)
    if not counts["available"]:
        return 0.0  # only started or claimed jobs left, no run time to weigh them
    return counts["available"] / queue["rate"] if queue["rate"] > 0 else None


def live_supervisors(conn: psycopg.Connection) -> list[dict[str, Any]]:
    """Supervisors whose heartbeat is within ``LIVE_AFTER_SECONDS``."""
    cur = conn.execute(_LIVE_SUPERVISORS, {"live": LIVE_AFTER_SECONDS})
    assert cur.description is not None  # a SELECT describes its columns
    names = [d.name for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur]


def stale_supervisors(conn: psycopg.Connection) -> int:
    """How many registered supervisors have stopped beating (not yet dropped)."""
    row = conn.execute(_STALE_SUPERVISORS, {"live": LIVE_AFTER_SECONDS}).fetchone()
    assert row is not None  # count(*) answers one row
    return row[0]


def silent_supervisors(conn: psycopg.Connection) -> list[dict[str, Any]]:
    """Registered supervisors presumed dead (no heartbeat for
    ``LIVE_AFTER_SECONDS``): ``id, host, pid, queues, children, busy`` as they
    last beat, ``heartbeat_age`` (seconds since), ``jobs_held`` (jobs still leased to
    it) and ``leases_expire_in`` (seconds until the last of those leases runs out, after
    which the next maintenance round of a live supervisor rescues them; None: none)."""
    cur = conn.execute(_SILENT_SUPERVISORS, {"live": LIVE_AFTER_SECONDS})
    assert cur.description is not None  # a SELECT describes its columns
    names = [d.name for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur]


def status(conn: psycopg.Connection,
           finished: FinishedTally | None = None) -> dict[str, Any]:
    """Everything ``supervisor status`` shows, as one JSON-ready dict: ``queues`` (see
    ``queue_stats``), ``supervisors`` (live ones), ``stale_supervisors`` (how many rows
    have stopped beating), ``presumed_dead`` (those rows: ``silent_supervisors``),
    ``unserved`` (queues with available jobs that no live
    supervisor serves) and ``unhandled`` (``{queue, kind}`` waiting in a served queue
    whose supervisors all publish their kinds and none names it), ``finished``
    (``counted``, ``budget`` in seconds, and when not counted ``estimated_rows``: the
    planner's row count of the table). ``finished``: see ``queue_stats``."""
    if finished is None:
        finished = finished_counts(conn)
    queues = queue_stats(conn, finished)
    # One transaction, so one now(): read apart, a supervisor whose last beat was
    # LIVE_AFTER_SECONDS ago was listed live by the first read and presumed dead by
    # the second, a millisecond later (found by CI, 2026-12-07).
    with conn.transaction():
        sups = live_supervisors(conn)
        silent = silent_supervisors(conn)
    served: dict[str, list[dict[str, Any]]] = {}
    for sup in sups:
        for name in sup["queues"] or ():
            served.setdefault(name, []).append(sup)
    waiting = [q["name"] for q in queues if q["counts"]["available"]]
    unserved = [name for name in waiting if name not in served]
    return {
        "queues": queues,
        "supervisors": [public_supervisor(s) for s in sups],
        "stale_supervisors": len(silent),
        "presumed_dead": silent,
        "unserved": unserved,
        "unhandled": _unhandled(conn, [n for n in waiting if n in served], served),
        "waiting_for_resources": waiting_for_resources(conn, sups),
        "paused_kinds": paused_kinds(conn),
        "finished": {"counted": finished.counted, "budget": finished.budget,
                     "estimated_rows": finished.estimated_rows},
    }


def _unhandled(conn: psycopg.Connection, queues: list[str],
               served: dict[str, list[dict[str, Any]]]) -> list[dict[str, str]]:
    # Kinds can only be judged when every supervisor serving the queue says which kinds
    # it has handlers for; otherwise we cannot tell and report nothing for that queue.
    # The cast: the condition below checked each _kinds(s) is a set; mypy cannot see it.
    known = {q: set().union(*(cast(set[str], _kinds(s)) for s in served[q]))
             for q in queues if all(_kinds(s) is not None for s in served[q])}
    if not known:
        return []
    rows = conn.execute(_AVAILABLE_KINDS, {"queues": sorted(known)}).fetchall()
    return [{"queue": q, "kind": k} for q, k in sorted(rows) if k not in known[q]]


def _kinds(sup: dict[str, Any]) -> set[str] | None:
    info = sup.get("info")
    kinds = info.get("kinds") if isinstance(info, dict) else None
    return set(kinds) if isinstance(kinds, list) else None


PUBLIC_SUPERVISOR_FIELDS = ("id", "host", "pid", "started_at", "heartbeat_at", "queues",
                            "children", "busy", "heartbeat_age", "uptime")


def public_supervisor(sup: dict[str, Any]) -> dict[str, Any]:
    """A live supervisor as shown to people and scripts (without its ``info``), with
    ``native``: its children busy in native code at its last beat (``{pid, worker, job,
    kind, seconds}`` each; issue 26); ``memory``: its memory budget (``_memory``).
    ``workers``: one object per child as its heartbeat last published it (see
    ``supervisor.pool.ChildReport``: worker, pid, state, job_id, kind, queue, attempt,
    job_seconds, held, rss_bytes, jobs_done, age_seconds, and any key added later)."""
    info = sup.get("info")
    native = info.get("native") if isinstance(info, dict) else None
    return {**{k: sup[k] for k in PUBLIC_SUPERVISOR_FIELDS}, "workers": _workers(sup),
            "native": native if isinstance(native, list) else [],
            "memory": _memory(sup)}


def _memory(sup: dict[str, Any]) -> dict[str, Any] | None:
    """Its memory budget as its last beat said (issue 51): ``budget`` bytes (None: no
    memory admission), its ``source`` (the flag, or the cgroup's limit less the
    parent's RSS and a margin), ``held`` (reserved by the jobs it runs), ``container``
    (``{limit, usage, source}``, or None outside one), ``unmeasured_running`` and
    ``measure`` (how a job's memory is counted). None: it publishes no budget."""
    info = sup.get("info")
    admission = info.get("admission") if isinstance(info, dict) else None
    if not isinstance(admission, dict):
        return None
    container = admission.get("container")
    return {"budget": admission.get("memory"), "source": admission.get("source"),
            "held": admission.get("held"),
            "container": container if isinstance(container, dict) else None,
            "unmeasured_running": admission.get("unmeasured_running"),
            "measure": admission.get("measure")}


def _workers(sup: dict[str, Any]) -> list[dict[str, Any]]:
    # Published by the supervisor itself into info (older ones publish none); a row
    # written by hand may hold anything, so only objects are kept.
    info = sup.get("info")
    kids = info.get("children") if isinstance(info, dict) else None
    return [k for k in kids if isinstance(k, dict)] if isinstance(kids, list) else []


_NATIVE_JOB = """
SELECT n FROM supervisor.supervisors, jsonb_array_elements(info->'native') AS n
WHERE heartbeat_at > now() - %(live)s * interval '1 second'
  AND jsonb_typeof(info->'native') = 'array' AND n->>'job' = %(id)s::text
LIMIT 1
"""


def native_job(conn: psycopg.Connection, job_id: int) -> dict[str, Any] | None:
    """The child running ``job_id`` if its supervisor said at its last beat that it is
    busy in native code (``{pid, worker, job, kind, seconds}``), else None."""
    row = conn.execute(_NATIVE_JOB, {"id": job_id, "live": LIVE_AFTER_SECONDS}).fetchone()
    return row[0] if row else None


def set_paused(conn: psycopg.Connection, name: str, paused: bool,
               stop_running: bool = False) -> dict[str, Any]:
    """Pause or resume queue ``name`` (its row in ``supervisor.queues`` is created when
    missing). Supervisors see it at their next claim; resuming wakes them through the
    schema's trigger. ``stop_running`` (pausing only): the supervisors running jobs of
    the queue send them the stop notice and give them back unspent (schema 0021).
    Returns ``{name, paused, was_paused, available, known, running, stop_running}``;
    ``known`` is False when the queue had no row, has no jobs and no live supervisor
    serves it (a typo, most likely); ``running`` counts its jobs running then."""
    check_queue_name(name)
    if stop_running and not paused:
        raise ValueError("stop_running goes with a pause, not a resume")
    with conn.transaction():
        row = conn.execute(_SET_PAUSED, {"name": name, "paused": paused,
                                         "stop_running": stop_running}).fetchone()
        assert row is not None  # the upsert returns its one row
        was, running = row
        row = conn.execute(_WAITING_IN_QUEUE, {"name": name}).fetchone()
        assert row is not None  # count(*) answers one row
        available = row[0]
        known = was is not None or available > 0 or _queue_in_use(conn, name)
    return {"name": name, "paused": paused, "was_paused": bool(was), "available": available,
            "known": known, "running": running, "stop_running": stop_running}


_SERVED_OR_HAS_JOBS = """
SELECT EXISTS (SELECT 1 FROM supervisor.supervisors
               WHERE %(name)s = ANY(queues)
                 AND heartbeat_at > now() - %(live)s * interval '1 second')
    OR EXISTS (SELECT 1 FROM supervisor.jobs WHERE queue = %(name)s)
"""


def _queue_in_use(conn: psycopg.Connection, name: str) -> bool:
    # Asked only for a name never paused before with nothing waiting. No index leads
    # with the queue for finished jobs, so a big table is scanned: bound the wait and
    # assume "in use" (no warning) when it runs out.
    conn.execute("SET LOCAL statement_timeout = '2s'")
    try:
        with conn.transaction():
            row = conn.execute(_SERVED_OR_HAS_JOBS,
                               {"name": name, "live": LIVE_AFTER_SECONDS}).fetchone()
    except psycopg.errors.QueryCanceled:
        return True
    return bool(row and row[0])
