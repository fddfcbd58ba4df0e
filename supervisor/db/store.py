"""Every SQL statement the parent runs against the queue, each batched: one statement
for any number of jobs, and no query at all for an empty batch.

Writes for a running job are fenced by ``(id, attempt, lease_owner, state='running')``:
when the lease has moved on (rescued, reclaimed, cancelled) the write changes nothing,
and the method returns the ids it could not write (and logs them) so the caller can
drop those jobs from its books.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import orjson
import psycopg

from shared import jobs
from shared.defaults import LIVE_STATES
from shared.jobs import Backoff, ClaimedJob
from supervisor.db import history, leases
from supervisor.db.leases import StoredLimits
from supervisor.db.nonblocking import NonBlockingQuery
from supervisor.db.sql import (
    BEAT,
    CACHED_PLAN_BATCH,
    COMPLETE,
    DROP_STALE,
    FAIL,
    HAS_DUE_WORK,
    INTERRUPT,
    LEAVE,
    LEFT_FOR_LATER,
    NEXT_DUE,
    PAUSED,
    PROMOTE,
    PRUNE,
    QUEUE_COUNTS,
    QUEUES_WITH_WORK,
    RECONCILE,
    RELEASE,
    RENEW,
    RESCUE,
    SNOOZE,
    STARTED,
    TRY_LEAD,
    claim_alone_statement,
    claim_statements,
)

log = logging.getLogger("supervisor.store")

@dataclass(slots=True, frozen=True)
class Completion:
    """A job whose handler returned; ``result_json`` is already JSON text (or None)."""

    id: int
    attempt: int
    result_json: str | None


@dataclass(slots=True, frozen=True)
class Failure:
    """A failed attempt. ``kind`` is one of ``shared.jobs.FAIL_*``. ``terminal`` (or the
    last allowed attempt) discards the job; otherwise it becomes retryable after
    ``retry_delay`` seconds, or the store's backoff when None."""

    id: int
    attempt: int
    kind: str
    message: str
    traceback: str | None = None
    retry_delay: float | None = None
    terminal: bool = False


class Store:
    """The parent's only way to change jobs. ``conn`` is an autocommit connection;
    ``Database`` assigns a new one after the old one broke (psycopg prepares statements
    again on it by itself)."""

    def __init__(
        self,
        conn: psycopg.Connection | None,
        owner: str,
        lease_ttl: float = 30.0,
        backoff: Backoff = jobs.DEFAULT_BACKOFF,
    ) -> None:
        self.conn = conn
        self.owner = owner
        self.lease_ttl = float(lease_ttl)
        self.backoff = backoff
        # For rows that leave max_attempts out: each kind's handler value, else this.
        self.max_attempts: Mapping[str, int] = {}
        self.default_attempts = jobs.DEFAULT_MAX_ATTEMPTS

    def claim(self, queue: str, kinds: Sequence[str], limit: int,
              aging: float = 0.0, per_key: int | None = None) -> list[ClaimedJob]:
        """Claim up to ``limit`` available, due jobs of ``kinds`` in ``queue`` (none if
        the queue is paused), in claim order: priority (one step more urgent per
        ``aging`` seconds waited, when > 0), then run_at, then id. ``per_key``: at most
        that many running per concurrency key (the queue's global per-key limit)."""
        if limit <= 0 or not kinds:
            return []
        params = self._claim_params(queue, kinds, limit, aging)
        if per_key is not None:
            params["per_key"] = per_key
        rows = self.conn.execute(claim_statements(aging, per_key)[0], params,
                                 prepare=True).fetchall()
        return _claimed_jobs(rows)

    def complete_and_claim(self, items: Sequence[Completion], queue: str,
                           kinds: Sequence[str], limit: int,
                           aging: float = 0.0) -> tuple[list[int], list[ClaimedJob]]:
        """``complete(items)`` and ``claim(queue, kinds, limit)`` in one statement;
        returns (fenced-off ids, claimed jobs)."""
        if not items:
            return [], self.claim(queue, kinds, limit, aging)
        if limit <= 0 or not kinds:
            return self.complete(items), []
        params = self.complete_and_claim_params(items, queue, kinds, limit, aging)
        rows = self.conn.execute(claim_statements(aging)[1], params, prepare=False).fetchall()
        return self.complete_and_claim_rows(items, rows)

    def send_complete_and_claim(self, runner: NonBlockingQuery, items: Sequence[Completion],
                                queue: str, kinds: Sequence[str], limit: int,
                                callback: Callable[[list[tuple] | Exception], None],
                                aging: float = 0.0,
                                starts: Sequence[tuple[int, int]] = (),
                                per_key: int | None = None) -> None:
        """``complete_and_claim`` without blocking, also recording ``starts``: sent on
        ``runner``; ``callback`` gets the rows (read them with
        ``complete_and_claim_rows``) or the error. ``per_key``: the queue's global
        per-concurrency-key limit (None: none, the plain claim)."""
        params = self.complete_and_claim_params(items, queue, kinds, limit, aging, starts)
        if per_key is not None:
            params["per_key"] = per_key
        if not items and not starts:  # an idle pickup, say: its plan may be cached
            runner.send(claim_alone_statement(aging, per_key), params, callback, prepare=True)
        else:
            # A cached plan for a few writes; a large batch is planned for its size (see
            # the note on _FENCE in sql.py).
            runner.send(claim_statements(aging, per_key)[2], params, callback,
                        prepare=len(items) + len(starts) <= CACHED_PLAN_BATCH)

    def complete_and_claim_params(self, items: Sequence[Completion], queue: str,
                                  kinds: Sequence[str], limit: int, aging: float = 0.0,
                                  starts: Sequence[tuple[int, int]] = ()) -> dict:
        """Parameters of ``COMPLETE_AND_CLAIM`` (for running it without blocking)."""
        return (self._claim_params(queue, kinds, limit, aging)
                | self._complete_params(items, starts))

    def complete_and_claim_rows(self, items: Sequence[Completion],
                                rows: list) -> tuple[list[int], list[ClaimedJob]]:
        """(fenced-off ids, claimed jobs) from ``COMPLETE_AND_CLAIM``'s rows."""
        written = {r[0] for r in rows if r[10]}
        return (self._report_fenced("complete", items, written),
                _claimed_jobs([r for r in rows if not r[10]]))

    def _claim_params(self, queue: str, kinds: Sequence[str], limit: int,
                      aging: float = 0.0) -> dict:
        attempts = self.max_attempts
        return {"owner": self.owner, "ttl": self.lease_ttl, "queue": queue,
                "kinds": list(kinds), "limit": limit, "aging": float(aging),
                "kind_attempts": [attempts.get(kind) for kind in kinds],
                "default_attempts": self.default_attempts}

    def _complete_params(self, items: Sequence[Completion],
                         starts: Sequence[tuple[int, int]] = ()) -> dict:
        return {"owner": self.owner, "ids": [c.id for c in items],
                "attempts": [c.attempt for c in items],
                "results": [c.result_json for c in items],
                "started_ids": [i for i, _ in starts], "started_attempts": [a for _, a in starts]}

    def started(self, items: Sequence[tuple[int, int]]) -> None:
        """Record that these ``(id, attempt)`` started in a child: from now on their
        attempt counts even if this supervisor dies."""
        if items:
            self.conn.execute(STARTED, {"owner": self.owner,
                                        "started_ids": [i for i, _ in items],
                                        "started_attempts": [a for _, a in items]})

    def complete(self, items: Sequence[Completion]) -> list[int]:
        """Mark jobs completed with their results; returns the fenced-off ids."""
        if not items:
            return []
        return self._fenced("complete", COMPLETE, self._complete_params(items), items)

    def fail(self, items: Sequence[Failure]) -> list[int]:
        """Record failed attempts: retryable after a delay, or discarded when terminal
        or out of attempts; one errors entry each. Returns the fenced-off ids."""
        if not items:
            return []
        params = self._failure_params(items)
        params["delays"] = [
            f.retry_delay if f.retry_delay is not None else self.backoff.delay(f.attempt)
            for f in items
        ]
        params["terminal"] = [bool(f.terminal) for f in items]
        # A job killed because it was cancelled is fenced off by design: its row is
        # already cancelled (or its lease moved on, which the engine logged).
        expected = {f.id for f in items if f.kind == jobs.FAIL_CANCELLED}
        return self._fenced("fail", FAIL, params, items, expected)

    def release(self, items: Sequence[tuple[int, int]]) -> list[int]:
        """Give back claimed jobs that never started: available again, the attempt not
        counted, no error recorded. Returns the fenced-off ids."""
        if not items:
            return []
        params = {"owner": self.owner, "ids": [i for i, _ in items],
                  "attempts": [a for _, a in items]}
        return self._fenced("release", RELEASE, params, items)

    def interrupt(self, items: Sequence[Failure]) -> list[int]:
        """Jobs cut off at the end of the drain grace: available again at once, the
        attempt not counted, an errors entry recorded. Returns the fenced-off ids."""
        if not items:
            return []
        return self._fenced("interrupt", INTERRUPT, self._failure_params(items), items)

    def snooze(self, items: Sequence[Failure]) -> list[int]:
        """Jobs whose handler raised ``workers.Snooze``: scheduled ``retry_delay`` seconds
        from now, the attempt not counted, no errors entry. Returns the fenced-off ids."""
        if not items:
            return []
        params = {"owner": self.owner, "ids": [f.id for f in items],
                  "attempts": [f.attempt for f in items],
                  "delays": [max(f.retry_delay or 0.0, 0.0) for f in items]}
        return self._fenced("snooze", SNOOZE, params, items)

    def renew(
        self, items: Sequence[tuple[int, int]], progress: Mapping[int, dict] | None = None
    ) -> list[int]:
        """Extend the leases of running jobs by the lease TTL, storing progress where
        given (keyed by job id). Returns the fenced-off ids."""
        if not items:
            return []
        progress = progress or {}
        params = {"owner": self.owner, "ttl": self.lease_ttl, "ids": [i for i, _ in items],
                  "attempts": [a for _, a in items],
                  "progress": [_json_or_none(progress.get(i)) for i, _ in items]}
        return self._fenced("renew", RENEW, params, items)

    def promote_due(self, limit: int = 1000) -> int:
        """Make up to ``limit`` scheduled/retryable jobs whose run_at has come available;
        returns how many. Safe to run from several supervisors at once."""
        cur = self.conn.execute(PROMOTE, {"limit": limit}, prepare=True)
        return cur.rowcount

    def rescue_expired(self, limit: int = 1000) -> list[tuple[int, str, bool]]:
        """Running jobs whose lease expired (any owner). One that had started: the
        attempt counts, an errors entry names the lost owner, then retryable with
        backoff or discarded at max_attempts. One that had not: available again, the
        attempt not counted. Returns ``(id, lost_owner, unstarted)`` triples."""
        b = self.backoff
        params = {"limit": limit, "base": b.base, "factor": b.factor, "cap": b.cap,
                  "jitter": b.jitter, "ttl": self.lease_ttl}
        rows = self.conn.execute(RESCUE, params).fetchall()
        return [(r[0], r[1], r[2]) for r in rows]

    def seconds_until_due(self, queues: Sequence[str], kinds: Sequence[str]) -> float | None:
        """Seconds until the earliest scheduled or retrying job of ``kinds`` in
        ``queues`` is due (<= 0: due now), or None when there is none."""
        if not queues or not kinds:
            return None
        row = self.conn.execute(NEXT_DUE, {"queues": list(queues), "kinds": list(kinds)},
                                prepare=True).fetchone()
        return None if row is None else row[0]

    def paused_queues(self, queues: Sequence[str]) -> set[str]:
        """Which of ``queues`` are paused."""
        rows = self.conn.execute(PAUSED, {"queues": list(queues)}, prepare=True)
        return {row[0] for row in rows}

    def reconcile(self, held: Sequence[int]) -> list[int]:
        """Release jobs running under this supervisor's name that it does not hold (a
        claim whose answer was lost with its connection): available again at once, the
        attempt not counted. Returns their ids."""
        rows = self.conn.execute(RECONCILE, {"owner": self.owner, "held": list(held)})
        return [row[0] for row in rows]

    # -- global limits (the statements are in supervisor.db.leases) -----------------------
    def read_limits(self, queues: Sequence[str]) -> dict[str, StoredLimits]:
        """The global limits of those of ``queues`` that have any."""
        return leases.read_limits(self.conn, queues)

    def renew_lease(self, queue: str, decide: Callable, to_row: Callable) -> object:
        """Renew this supervisor's slice of ``queue`` (see ``leases.renew_lease``)."""
        return leases.renew_lease(self.conn, queue, self.owner, self.lease_ttl, decide, to_row)

    def return_leases(self, queues: Sequence[str] | None = None) -> None:
        """Give back this supervisor's slices (of ``queues``, or all)."""
        leases.return_leases(self.conn, self.owner, queues)

    # -- maintenance --------------------------------------------------------------------
    def beat(self, host: str, pid: int, queues: Sequence[str], children: int, busy: int,
             info: dict) -> None:
        """Record this supervisor's heartbeat row (for ``status`` and stale detection)."""
        self.conn.execute(BEAT, {"id": self.owner, "host": host, "pid": pid,
                                 "queues": list(queues), "children": children, "busy": busy,
                                 "info": orjson.dumps(info).decode()})

    def lead_chores(self, lock_key: int, stale_after: float) -> list[tuple[int, str]] | None:
        """If this supervisor wins the round's advisory lock: rescue expired leases and
        drop supervisors silent for ``stale_after`` s, in one transaction. Returns the
        rescued ``(id, lost_owner)`` pairs, or None when another supervisor leads."""
        with self.conn.transaction():
            if not self.conn.execute(TRY_LEAD, {"key": lock_key}).fetchone()[0]:
                return None
            rescued = self.rescue_expired()
            self.conn.execute(DROP_STALE, {"stale": stale_after})
        return rescued

    def prune(self, retention: float, discarded: float, batch: int) -> int:
        """Delete up to ``batch`` finished jobs older than ``retention`` s (discarded
        ones: older than ``discarded`` s); how many."""
        cur = self.conn.execute(PRUNE, {"retention": min(retention, discarded),
                                        "discarded": discarded, "batch": batch})
        return max(cur.rowcount, 0)

    def roll_up(self, lag: float = history.LAG, slice_seconds: float = history.SLICE) -> int:
        """Add the next slice of closed minutes to the per-minute history
        (``supervisor.db.history``); how many (minute, queue, kind) rows it wrote."""
        return history.roll_up(self.conn, lag, slice_seconds=slice_seconds)

    def leave(self) -> None:
        """Remove this supervisor's heartbeat row (clean exit)."""
        self.conn.execute(LEAVE, {"id": self.owner})

    def queue_counts(self, queues: Sequence[str]) -> dict[str, dict[str, int]]:
        """For each queue, counts of its unfinished jobs: ``available``, ``scheduled``,
        ``retryable``, ``running``, and ``due`` (available, scheduled or retryable with
        run_at passed). Finished states are not counted (that is history, not work)."""
        counts = {q: dict.fromkeys((*LIVE_STATES, "due"), 0) for q in queues}
        if not queues:
            return counts
        for queue, state, total, due in self.conn.execute(QUEUE_COUNTS,
                                                          {"queues": list(queues)}):
            counts[queue][state] = total
            if state != "running":
                counts[queue]["due"] += due
        return counts

    def queues_with_work(self, queues: Sequence[str], kinds: Sequence[str]) -> set[str]:
        """Which of ``queues`` (not paused) hold available, due jobs of ``kinds`` now: the
        scheduler shares children only among these."""
        if not queues or not kinds:
            return set()
        rows = self.conn.execute(QUEUES_WITH_WORK, {"queues": list(queues),
                                                     "kinds": list(kinds)}, prepare=True)
        return {row[0] for row in rows}

    def has_due_work(self, queues: Sequence[str], kinds: Sequence[str],
                     horizon: float = 0.0) -> bool:
        """Whether any job of ``kinds`` in ``queues`` can be claimed now, or is scheduled
        or retrying and due within ``horizon`` seconds. Paused queues do not count:
        burst mode should not wait for a queue nobody may serve."""
        if not queues or not kinds:
            return False
        params = {"queues": list(queues), "kinds": list(kinds), "horizon": horizon}
        row = self.conn.execute(HAS_DUE_WORK, params).fetchone()
        return bool(row and row[0])

    def left_for_later(self, queues: Sequence[str], kinds: Sequence[str]) -> tuple[int, object]:
        """(how many, earliest run_at) of scheduled or retrying jobs in ``queues``."""
        row = self.conn.execute(LEFT_FOR_LATER,
                                {"queues": list(queues), "kinds": list(kinds)}).fetchone()
        return (row[0], row[1]) if row else (0, None)

    def _failure_params(self, items: Sequence[Failure]) -> dict:
        return {"owner": self.owner, "ids": [f.id for f in items],
                "attempts": [f.attempt for f in items], "kinds": [f.kind for f in items],
                "messages": [f.message for f in items],
                "tracebacks": [f.traceback for f in items]}

    def _fenced(self, what: str, sql: str, params: dict, items: Sequence,
                expected: frozenset[int] | set[int] = frozenset()) -> list[int]:
        written = {row[0] for row in self.conn.execute(sql, params, prepare=False)}
        return self._report_fenced(what, items, written, expected)

    @staticmethod
    def _report_fenced(what: str, items: Sequence, written: set[int],
                       expected: frozenset[int] | set[int] = frozenset()) -> list[int]:
        ids = [item[0] if isinstance(item, tuple) else item.id for item in items]
        fenced = [i for i in ids if i not in written]
        if [i for i in fenced if i not in expected]:
            log.warning("%s: %d job(s) fenced off (lease moved on): %s", what, len(fenced),
                        fenced[:20])
        return fenced


def _claimed_jobs(rows: list) -> list[ClaimedJob]:
    claimed = [ClaimedJob(id=r[0], kind=r[1], queue=r[2], attempt=r[3], max_attempts=r[4],
                          priority=r[5], timeout=r[6], args_json=r[7], wait_seconds=r[8],
                          trace_context=r[9])
               for r in rows]
    # RETURNING has no order; wait_seconds is now() - run_at, so -wait sorts by run_at.
    claimed.sort(key=lambda job: (job.priority, -job.wait_seconds, job.id))
    return claimed


def _json_or_none(value: object) -> str | None:
    return None if value is None else orjson.dumps(value).decode()
