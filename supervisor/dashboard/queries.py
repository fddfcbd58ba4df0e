"""What the dashboard reads and changes in the database: plain SQL over the contract
tables (``supervisor.jobs``, ``supervisor.queues``, ``supervisor.supervisors``).

Plain functions over an autocommit psycopg connection, returning plain data. The
operator's queries the CLI runs too (counts per queue, live supervisors, one job,
retry, cancel, pause) come from the admin room (``supervisor.admin``), so the dashboard
and ``supervisor status`` never disagree; only the filtered, paged job list with text
search is written here.
"""

from __future__ import annotations

from typing import Any

import psycopg

from shared.jobs import STATES
from supervisor import admin
from supervisor.admin import AdminError, check_queue_name

MAX_PAGE = 500
DEFAULT_PAGE = 50
MAX_SEARCH = 200  # characters of ?q=; longer text is a mistake, not a search

# Text search reads the kind, the args and the error messages as text: a sequential
# scan bounded by LIMIT, which is what an operator hunting one job needs. The id
# filter lets a pasted job id find its job too.
_JOBS = """
SELECT id, kind, queue, state, attempt, max_attempts, priority, run_at, created_at,
       attempted_at, finished_at, progress,
       errors -> -1 ->> 'message' AS last_error
FROM supervisor.jobs
WHERE (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s)
  AND (%(state)s::text IS NULL OR state = %(state)s)
  AND (%(before)s::bigint IS NULL OR id < %(before)s)
  AND (%(like)s::text IS NULL
       OR id = %(id)s::bigint
       OR kind ILIKE %(like)s
       OR args::text ILIKE %(like)s
       OR jsonb_path_query_array(errors, '$[*].message')::text ILIKE %(like)s)
ORDER BY id DESC
LIMIT %(limit)s
"""

_JOB_EXISTS = "SELECT 1 FROM supervisor.jobs WHERE id = %(id)s"

_QUEUE_NAMES = """
SELECT name FROM supervisor.queues
UNION
SELECT DISTINCT queue FROM supervisor.jobs
ORDER BY 1
"""


class NotFound(AdminError):
    """The job or page asked for does not exist."""


def overview(conn: psycopg.Connection) -> dict[str, Any]:
    """The queues page: ``supervisor status``'s data (queues with counts by state, rate,
    oldest waiting, paused; live supervisors; unserved and unhandled work) plus
    ``totals``, the counts by state summed over every queue."""
    data = admin.status(conn)
    totals = dict.fromkeys(STATES, 0)
    for queue in data["queues"]:
        for state, count in queue["counts"].items():
            totals[state] += count
    data["totals"] = totals
    return data


def queues(conn: psycopg.Connection) -> list[dict[str, Any]]:
    """Every queue with its counts by state, rate, oldest waiting job and paused flag."""
    return admin.queue_stats(conn)


def queue_names(conn: psycopg.Connection) -> list[str]:
    """Every queue name that has jobs or a row in ``supervisor.queues``, sorted."""
    return [row[0] for row in conn.execute(_QUEUE_NAMES)]


def supervisors(conn: psycopg.Connection) -> dict[str, Any]:
    """Live supervisors (host, pid, children, busy, queues, heartbeat age, uptime) and
    how many registered ones have stopped beating. Reads only the supervisors table."""
    live = [admin.public_supervisor(sup) for sup in admin.live_supervisors(conn)]
    return {"supervisors": live, "stale": admin.stale_supervisors(conn)}


def parse_filters(params: dict[str, str]) -> dict[str, Any]:
    """The job list's filters from query parameters (``queue``, ``kind``, ``state``,
    ``q``, ``before``, ``limit``), empty ones dropped; ``AdminError`` (usage) naming the
    first that is malformed."""
    def text(name: str) -> str | None:
        value = (params.get(name) or "").strip()
        if "\x00" in value:  # PostgreSQL text cannot hold it: a 400, not a failed query
            raise AdminError(f"{name} must not contain a NUL byte", usage=True)
        return value or None

    state = admin.check_state(text("state"))
    queue = text("queue")
    if queue is not None:
        check_queue_name(queue)
    search = text("q")
    if search is not None and len(search) > MAX_SEARCH:
        raise AdminError(f"q has at most {MAX_SEARCH} characters; got {len(search)}",
                         usage=True)
    before = text("before")
    limit = text("limit")
    return {
        "queue": queue,
        "kind": text("kind"),
        "state": state,
        "q": search,
        "before": admin.parse_job_id(before) if before is not None else None,
        "limit": _limit(limit) if limit is not None else DEFAULT_PAGE,
    }


def _limit(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= MAX_PAGE:
        raise AdminError(f"limit is an integer from 1 to {MAX_PAGE}; got {text!r}",
                         usage=True)
    return int(text)


def jobs(conn: psycopg.Connection, filters: dict[str, Any]) -> dict[str, Any]:
    """One page of jobs, newest first, matching ``filters`` (see ``parse_filters``):
    ``{jobs, next_before}``; ``next_before`` is the id to pass as ``before`` for the
    next page, or None on the last one."""
    search = filters["q"]
    like = None
    if search is not None:
        like = "%" + search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    job_id = int(search) if search is not None and search.isdigit() and len(search) < 19 else None
    params = {"queue": filters["queue"], "kind": filters["kind"], "state": filters["state"],
              "before": filters["before"], "like": like, "id": job_id,
              "limit": filters["limit"] + 1}
    cur = conn.execute(_JOBS, params)
    assert cur.description is not None  # a SELECT describes its columns
    names = [d.name for d in cur.description]
    rows = [dict(zip(names, row, strict=True)) for row in cur]
    more = len(rows) > filters["limit"]
    rows = rows[:filters["limit"]]
    return {"jobs": rows, "next_before": rows[-1]["id"] if more else None}


def job(conn: psycopg.Connection, job_id: int) -> dict[str, Any]:
    """Every column of one job (args, result, progress, errors with tracebacks);
    ``NotFound`` when there is none."""
    try:
        return admin.get_job(conn, job_id)
    except AdminError as exc:
        raise NotFound(str(exc)) from None


def retry(conn: psycopg.Connection, job_id: int) -> str:
    """Retry one discarded, cancelled or retryable job now; returns its former state."""
    return _acting_on(conn, job_id, admin.retry_job)


def cancel(conn: psycopg.Connection, job_id: int) -> str:
    """Cancel one unfinished job (a running one's supervisor kills it); returns its
    former state."""
    return _acting_on(conn, job_id, admin.cancel_job)


def _acting_on(conn: psycopg.Connection, job_id: int, action) -> str:
    try:
        return action(conn, job_id)
    except AdminError as exc:
        # The admin functions say "no job" and "wrong state" alike; the dashboard
        # answers 404 for one and 409 for the other.
        if conn.execute(_JOB_EXISTS, {"id": job_id}).fetchone() is None:
            raise NotFound(str(exc)) from None
        raise


def set_paused(conn: psycopg.Connection, name: str, paused: bool) -> dict[str, Any]:
    """Pause or resume queue ``name``: ``{name, paused, was_paused, available}``."""
    return admin.set_paused(conn, name, paused)
