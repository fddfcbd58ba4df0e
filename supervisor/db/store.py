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
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson
import psycopg

from shared import defaults, jobs
from shared.defaults import LIVE_STATES
from shared.horizon import HorizonReport, read_horizon
from shared.jobs import Backoff, ClaimedJob
from supervisor.db import claim, leases
from supervisor.db.attempt_cost import completion_params, usage_params
from supervisor.db.claim import HEAD, ClaimKey, ClaimRequest, ClaimResult
from supervisor.db.leases import LeaseRow, Slice, StoredLimits
from supervisor.db.nonblocking import NonBlockingQuery
from supervisor.db.params import CrashCount, CrashLimits, Heartbeat, Prune, PruneBatches
from supervisor.db.records import (
    Attempt,
    Completion,
    Failure,
    FailuresWritten,
    FencedRow,
    Renewal,
    Snooze,
    in_id_order,
)
from supervisor.db.rows import KindPause, LaterWork, LeadRound, Rescued, TrippedKind
from supervisor.db.sql import (
    BEAT,
    COMPLETE,
    DROP_STALE,
    EXPIRE,
    EXPIRE_CLAIMED,
    FAIL,
    HAS_DUE_WORK,
    INTERRUPT,
    KIND_CRASHES,
    KIND_CRASHES_CLEAR,
    KIND_MEMORY_P95,
    KIND_MEMORY_SAVE,
    LEAVE,
    LEFT_FOR_LATER,
    NEXT_DUE,
    PAUSED,
    PAUSED_KINDS,
    PROMOTE,
    PRUNE_BATCHES,
    PRUNE_DISCARDED,
    PRUNE_DONE,
    QUEUE_COUNTS,
    QUEUES_WITH_WORK,
    RECONCILE,
    RELEASE,
    RENEW,
    RESCUE,
    SNOOZE,
    STARTED,
    TRY_LEAD,
    UNHANDLED_WAITING,
)

log = logging.getLogger("supervisor.store")

T = TypeVar("T")

RESCUE_LIMIT = 1000  # jobs one rescue puts back at most
FULL_SCAN = float("-inf")  # a rescue floor below every lease: look at every expired one


@dataclass(frozen=True)
class StoreSettings:
    """What the store's statements apply to rows that leave it out, fixed when the store
    is made: the supervisor's handlers decide it once, at start."""

    # For rows that leave max_attempts out: each kind's handler value, else the default.
    max_attempts: Mapping[str, int] = field(default_factory=dict)
    default_attempts: int = jobs.DEFAULT_MAX_ATTEMPTS
    # Crashes in a row with one signature that discard a job as poison (0: never):
    # each kind's @job(poison_after=...), else the default.
    poison_after: Mapping[str, int] = field(default_factory=dict)
    default_poison_after: int = defaults.POISON_AFTER
    crash_rule: jobs.CrashRule = field(default_factory=jobs.CrashRule)  # what may make poison


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
        settings: StoreSettings | None = None,
    ) -> None:
        self.conn = conn  # None until Database.open() connects (and while it is down)
        self.owner = owner
        self.lease_ttl = float(lease_ttl)
        self.backoff = backoff
        self.settings = settings if settings is not None else StoreSettings()
        self._run_once: set[str] = set()  # statements run once: prepared from the next run

    def _again(self, sql: str) -> bool:
        """Whether ``sql`` runs prepared: from its second run on. Preparing costs a round
        trip of its own (psycopg waits for the Parse before it executes), which a
        statement run once at start, before the first claim, should not pay."""
        if sql in self._run_once:
            return True
        self._run_once.add(sql)
        return False


    @property
    def connection(self) -> psycopg.Connection:
        """The work connection; the engine calls the store only while it is up."""
        conn = self.conn
        if conn is None:
            raise psycopg.InterfaceError("the work connection is not open")
        return conn
    def claim(self, queue: str, kinds: Sequence[str], limit: int,
              aging: float = 0.0, per_key: int | None = None) -> list[ClaimedJob]:
        """The jobs of ``run_claim(ClaimRequest(queue, kinds, limit, aging, per_key))``: up
        to ``limit`` available, due jobs of ``kinds`` in ``queue`` (none if the queue is
        paused), in claim order."""
        return self.run_claim(ClaimRequest(queue, kinds, limit, aging, per_key)).jobs

    def run_claim(self, request: ClaimRequest) -> ClaimResult:
        """Make the claim ``request`` describes, blocking: its carried writes and up to
        ``request.limit`` jobs in one statement. See ``supervisor.db.claim``."""
        if not request.takes_jobs:  # nothing to claim: the writes alone
            if request.starts:
                self.started(request.starts)
            return ClaimResult([], self.complete(request.completions))
        rows = self.connection.cursor(row_factory=claim.cursor_rows).execute(
            claim.claim_sql(claim.variant(request, blocking=True)), self._claim_params(request),
            prepare=claim.prepare(request)).fetchall()
        return self._claim_result(request, rows)

    def send_claim(self, runner: NonBlockingQuery, request: ClaimRequest,
                   callback: Callable[[ClaimResult | Exception], None]) -> None:
        """``run_claim(request)`` without blocking: sent on ``runner``; ``callback`` gets
        the ``ClaimResult``, or the error, from a later ``runner.handle_event``. Raises
        ``psycopg.OperationalError`` at once if the connection is gone."""
        def answered(outcome: list | Exception) -> None:
            callback(outcome if isinstance(outcome, Exception)
                     else self._claim_result(request, outcome))

        runner.send(claim.claim_prepared(claim.variant(request, blocking=False)),
                    self._claim_params(request), answered, prepare=True,
                    row_factory=claim.row_maker)

    def _claim_params(self, request: ClaimRequest) -> dict[str, Any]:
        settings = self.settings
        return claim.params(request, self.owner, self.lease_ttl, settings.max_attempts,
                            settings.default_attempts)

    def _claim_result(self, request: ClaimRequest, rows: list) -> ClaimResult:
        written, jobs = claim.decode(request, rows)
        return ClaimResult(jobs, self._report_fenced("complete", request.completions,
                                                     set(written)))

    def _complete_params(self, items: Sequence[Completion]) -> dict:
        return {"owner": self.owner, **completion_params(in_id_order(items))}

    def started(self, items: Sequence[Attempt]) -> None:
        """Record that these attempts started in a child: from now on they count even
        if this supervisor dies."""
        if items:
            items = in_id_order(items)
            self.connection.execute(STARTED, {"owner": self.owner,
                                              "started_ids": [a.id for a in items],
                                              "started_attempts": [a.attempt for a in items]})

    def complete(self, items: Sequence[Completion]) -> list[int]:
        """Mark jobs completed with their results; returns the fenced-off ids."""
        if not items:
            return []
        return self._fenced("complete", COMPLETE, self._complete_params(items), items)

    def fail(self, items: Sequence[Failure]) -> list[int]:
        """Record failed attempts (``write_failures``), logging each poison discard
        here: for callers that say nothing of their own about a failure (the testing
        helpers). Returns the fenced-off ids."""
        written = self.write_failures(items)
        for failure in items:
            if failure.id in written.poisoned:
                log.warning("job %d %s attempt %d discarded as poison: the same crash as "
                            "its last attempt (%s)", failure.id, failure.job_kind,
                            failure.attempt,
                            jobs.crash_signature(failure.kind, failure.message))
        return written.fenced

    def write_failures(self, items: Sequence[Failure]) -> FailuresWritten:
        """Record failed attempts: retryable after a delay, or discarded when terminal,
        out of attempts or poison (the same crash as its last ones); one errors entry
        each. The fenced-off ones are reported (``_report_fenced``); what was written
        and what the rows discarded as poison comes back, so the caller's one line about
        each attempt follows the decision."""
        if not items:
            return FailuresWritten(items, frozenset(), frozenset())
        items = in_id_order(items)
        params = self._failure_params(items)
        params["delays"] = [
            f.retry_delay if f.retry_delay is not None else self.backoff.delay(f.attempt)
            for f in items
        ]
        params["terminal"] = [bool(f.terminal) for f in items]
        params["ran"] = [f.ran for f in items]
        params |= usage_params(items)
        settings = self.settings
        params["signatures"] = [settings.crash_rule.signature(f.job_kind, f.kind, f.message)
                                for f in items]
        params["poison_after"] = [
            settings.poison_after.get(f.job_kind, settings.default_poison_after) for f in items]
        # A job killed because it was cancelled is fenced off by design: its row is
        # already cancelled (or its lease moved on, which the engine logged).
        expected = {f.id for f in items if f.kind == jobs.FAIL_CANCELLED}
        rows = self.connection.execute(FAIL, params, prepare=False).fetchall()
        written = frozenset(row[0] for row in rows)
        self._report_fenced("fail", items, set(written), expected)
        return FailuresWritten(items, written,
                               frozenset(job_id for job_id, poison in rows if poison))

    def release(self, items: Sequence[Attempt]) -> list[int]:
        """Give back claimed jobs that never started: available again, the attempt not
        counted, no error recorded. Returns the fenced-off ids."""
        if not items:
            return []
        items = in_id_order(items)
        params = _attempt_params(self.owner, items)
        return self._fenced("release", RELEASE, params, items)

    def expire_claimed(self, items: Sequence[Attempt]) -> list[int]:
        """Claimed jobs that expired before they started: 'expired', the attempt not
        counted. Returns the fenced-off ids."""
        if not items:
            return []
        items = in_id_order(items)
        params = _attempt_params(self.owner, items)
        return self._fenced("expire", EXPIRE_CLAIMED, params, items)

    def interrupt(self, items: Sequence[Failure]) -> list[int]:
        """Jobs cut off at the end of the drain grace: available again at once, the
        attempt not counted, an errors entry recorded. Returns the fenced-off ids."""
        if not items:
            return []
        items = in_id_order(items)
        return self._fenced("interrupt", INTERRUPT, self._failure_params(items), items)

    def snooze(self, items: Sequence[Snooze]) -> list[int]:
        """Jobs whose handler raised ``workers.Snooze``: scheduled ``delay`` seconds from
        now, the attempt not counted, no errors entry. Returns the fenced-off ids."""
        if not items:
            return []
        items = in_id_order(items)
        params = _attempt_params(self.owner, items) | {
            "delays": [max(s.delay or 0.0, 0.0) for s in items]}
        return self._fenced("snooze", SNOOZE, params, items)

    def renew(self, items: Sequence[Renewal]) -> list[int]:
        """Extend the leases of running jobs by the lease TTL, storing each one's progress
        and checkpoint where given. Returns the fenced-off ids."""
        if not items:
            return []
        items = in_id_order(items)
        params = _attempt_params(self.owner, items) | {
            "ttl": self.lease_ttl,
            "progress": [_json_or_none(r.progress) for r in items],
            "checkpoints": [r.checkpoint for r in items]}
        return self._fenced("renew", RENEW, params, items)

    def promote_due(self, limit: int = 1000) -> int:
        """Make up to ``limit`` scheduled/retryable jobs whose run_at has come available;
        returns how many. Safe to run from several supervisors at once."""
        cur = self.connection.execute(PROMOTE, {"limit": limit}, prepare=self._again(PROMOTE))
        return cur.rowcount

    def rescue_expired(self, limit: int = RESCUE_LIMIT, floor: float = FULL_SCAN
                       ) -> list[Rescued]:
        """Running jobs whose lease expired (any owner), at or above ``floor`` (epoch
        seconds; ``FULL_SCAN``: every one). One that had started: the attempt counts,
        an errors entry names the lost owner, then retryable with backoff or discarded
        at max_attempts. One that had not: available again, the attempt not counted.
        Returns what was rescued, one ``Rescued`` a job."""
        b = self.backoff
        params = {"limit": limit, "base": b.base, "factor": b.factor, "cap": b.cap,
                  "jitter": b.jitter, "ttl": self.lease_ttl, "floor": floor}
        rows = self.connection.execute(RESCUE, params).fetchall()
        return [Rescued(job_id, lost_owner, never_started)
                for job_id, lost_owner, never_started in rows]

    def seconds_until_due(self, queues: Sequence[str], kinds: Sequence[str]) -> float | None:
        """Seconds until the earliest scheduled or retrying job of ``kinds`` in
        ``queues`` is due (<= 0: due now), or None when there is none."""
        if not queues or not kinds:
            return None
        row = self.connection.execute(NEXT_DUE, {"queues": list(queues), "kinds": list(kinds)},
                                      prepare=self._again(NEXT_DUE)).fetchone()
        return None if row is None else row[0]

    def queue_pauses(self, queues: Sequence[str]) -> dict[str, bool]:
        """Which of ``queues`` are paused: ``{name: stop_running}``, True for a queue
        paused with ``--stop-running`` (its running jobs are to stop too)."""
        rows = self.connection.execute(PAUSED, {"queues": list(queues)},
                                       prepare=self._again(PAUSED))
        return {name: stop_running for name, stop_running in rows}

    def reconcile(self, held: Sequence[int]) -> list[int]:
        """Release jobs running under this supervisor's name that it does not hold (a
        claim whose answer was lost with its connection): available again at once, the
        attempt not counted. Returns their ids."""
        rows = self.connection.execute(RECONCILE, {"owner": self.owner, "held": list(held)})
        return [row[0] for row in rows]

    # -- global limits (the statements are in supervisor.db.leases) -----------------------
    def read_limits(self, queues: Sequence[str]) -> dict[str, StoredLimits]:
        """The global limits of those of ``queues`` that have any."""
        return leases.read_limits(self.connection, queues,
                                  prepare=self._again(leases.READ_LIMITS))

    def renew_lease(self, queue: str, decide: Callable[[dict[str, LeaseRow]], T],
                    to_row: Callable[[T], Slice]) -> T:
        """Renew this supervisor's slice of ``queue`` (see ``leases.renew_lease``)."""
        return leases.renew_lease(self.connection, queue, self.owner, self.lease_ttl, decide,
                                  to_row)

    def return_leases(self, queues: Sequence[str] | None = None) -> None:
        """Give back this supervisor's slices (of ``queues``, or all)."""
        leases.return_leases(self.connection, self.owner, queues)

    # -- maintenance --------------------------------------------------------------------
    def beat(self, heartbeat: Heartbeat) -> None:
        """Record this supervisor's heartbeat row (for ``status`` and stale detection)."""
        self.connection.execute(BEAT, heartbeat.bind(self.owner))

    def lead_chores(self, lock_key: int, stale_after: float,
                    rescue_floor: float = FULL_SCAN) -> LeadRound | None:
        """If this supervisor wins the round's advisory lock: rescue expired leases (at
        or above ``rescue_floor``) and drop supervisors silent for ``stale_after`` s, in
        one transaction. Returns the round, or None when another supervisor leads."""
        with self.connection.transaction():
            row = self.connection.execute(TRY_LEAD, {"key": lock_key,
                                                     "ttl": self.lease_ttl}).fetchone()
            if row is None or not row[0]:
                return None
            _, began_at, rescue_open = row
            rescued = self.rescue_expired(floor=rescue_floor) if rescue_open else []
            self.connection.execute(DROP_STALE, {"stale": stale_after})
        return LeadRound(rescued, began_at, bool(rescue_open))

    def prune(self, prune: Prune) -> int:
        """Delete one batch of finished jobs past their retention (``Prune``); how many."""
        cur = self.connection.execute(PRUNE_DONE if prune.done else PRUNE_DISCARDED,
                                      prune.bind())
        return max(cur.rowcount, 0)

    def prune_batches(self, prune: PruneBatches) -> int:
        """Delete one batch of finished batches past the retention whose members and
        callback were all pruned (``PruneBatches``); how many."""
        cur = self.connection.execute(PRUNE_BATCHES, prune.bind())
        return max(cur.rowcount, 0)

    def expire(self, batch: int) -> int:
        """Mark up to ``batch`` waiting jobs whose expires_at has passed as 'expired'
        (final, never run); how many."""
        cur = self.connection.execute(EXPIRE, {"batch": batch})
        return max(cur.rowcount, 0)

    def leave(self) -> None:
        """Remove this supervisor's heartbeat row (clean exit)."""
        self.connection.execute(LEAVE, {"id": self.owner})

    def queue_counts(self, queues: Sequence[str]) -> dict[str, dict[str, int]]:
        """For each queue, counts of its unfinished jobs: ``available``, ``scheduled``,
        ``retryable``, ``running``, and ``due`` (available, scheduled or retryable with
        run_at passed). Finished states are not counted (that is history, not work)."""
        counts = {q: dict.fromkeys((*LIVE_STATES, "due"), 0) for q in queues}
        if not queues:
            return counts
        for queue, state, total, due in self.connection.execute(QUEUE_COUNTS,
                                                                {"queues": list(queues)}):
            counts[queue][state] = total
            if state != "running":
                counts[queue]["due"] += due
        return counts

    def horizon(self) -> HorizonReport:
        """Who holds the MVCC horizon back, and the queue table's dead row versions."""
        return read_horizon(self.connection)

    def discard_plans(self) -> None:
        """Have the statements prepared on the work connection planned again at their
        next use, from the tables as they are (``Database.refresh_plans``)."""
        self.connection.execute("DISCARD PLANS", prepare=False)

    def kind_memory_p95(self, kinds: Sequence[str]) -> dict[str, int]:
        """Each kind's measured size: the p95 of its newest peaks (0033) once it has 20
        samples, before its largest peak; kinds with none are left out: the default
        memory reservation of its undeclared jobs."""
        if not kinds:
            return {}
        rows = self.connection.execute(KIND_MEMORY_P95, {"kinds": list(kinds)})
        return {kind: int(rss) for kind, rss in rows if rss is not None and rss > 0}

    def save_kind_memory(self, samples: Mapping[str, Sequence[int]]) -> int:
        """Keep the peaks each kind's attempts here used, oldest first
        (``supervisor.kind_memory``, 0026 and 0033), for every supervisor's reading and
        those that start later. Returns how many kinds were written."""
        kinds = [kind for kind, peaks in samples.items() for _ in peaks]
        if not kinds:
            return 0
        peaks = [peak for kind_peaks in samples.values() for peak in kind_peaks]
        return self.connection.execute(KIND_MEMORY_SAVE, {
            "kinds": kinds, "peaks": peaks}).rowcount

    def record_crashes(self, kinds: Sequence[str], limits: CrashLimits) -> list[TrippedKind]:
        """Record one crash per entry of ``kinds``; a kind past ``limits`` (more than
        ``failures`` within ``window`` seconds, across supervisors) is paused for
        ``cooldown``. Returns the kinds this paused, with their count."""
        tripped = [TrippedKind(kind, int(n)) for kind, n in self.connection.execute(
            KIND_CRASHES, CrashCount(kinds, limits).bind()).fetchall()]
        if tripped:
            self.connection.execute(KIND_CRASHES_CLEAR, {"kinds": [t.kind for t in tripped],
                                                         "window": limits.window})
        return tripped

    def paused_kinds(self) -> dict[str, KindPause]:
        """Kinds paused now, each with why and for how long."""
        return {kind: KindPause(reason, left) for kind, reason, left in
                self.connection.execute(PAUSED_KINDS)}

    def queues_with_work(self, queues: Sequence[str], kinds: Sequence[str],
                         starts: Mapping[str, ClaimKey] | None = None) -> dict[str, ClaimKey]:
        """Which of ``queues`` (not paused) hold available, due jobs of ``kinds`` now (the
        scheduler shares children only among these), each with the claim-order key of
        its first such job (the claim cursors move back to it). ``starts``: a queue
        named there is looked at after that key (its claim cursor), the others from the
        head of the claim index."""
        if not queues or not kinds:
            return {}
        begin = [(starts or {}).get(queue, HEAD) for queue in queues]
        rows = self.connection.execute(QUEUES_WITH_WORK, {
            "queues": list(queues), "kinds": list(kinds),
            "start_priorities": [key.priority for key in begin],
            "start_run_ats": [key.run_at for key in begin],
            "start_ids": [key.id for key in begin]},
            prepare=self._again(QUEUES_WITH_WORK))
        return {queue: ClaimKey(priority, run_at, job_id)
                for queue, priority, run_at, job_id in rows}

    def has_due_work(self, queues: Sequence[str], kinds: Sequence[str],
                     horizon: float = 0.0) -> bool:
        """Whether any job of ``kinds`` in ``queues`` can be claimed now, or is scheduled
        or retrying and due within ``horizon`` seconds. Paused queues do not count:
        burst mode should not wait for a queue nobody may serve."""
        if not queues or not kinds:
            return False
        params = {"queues": list(queues), "kinds": list(kinds), "horizon": horizon}
        row = self.connection.execute(HAS_DUE_WORK, params).fetchone()
        return bool(row and row[0])

    def left_for_later(self, queues: Sequence[str], kinds: Sequence[str]) -> LaterWork:
        """How many scheduled or retrying jobs of ``kinds`` wait in ``queues``, and the
        earliest run_at among them."""
        row = self.connection.execute(LEFT_FOR_LATER,
                                      {"queues": list(queues), "kinds": list(kinds)}).fetchone()
        return LaterWork(row[0], row[1]) if row else LaterWork()

    def unhandled_waiting(self, queues: Sequence[str], kinds: Sequence[str]) -> dict[str, int]:
        """How many jobs wait in ``queues`` per kind not among ``kinds`` (no handler)."""
        rows = self.connection.execute(UNHANDLED_WAITING,
                                       {"queues": list(queues), "kinds": list(kinds)}).fetchall()
        return {kind: count for kind, count in rows}

    def _failure_params(self, items: Sequence[Failure]) -> dict:
        """``items`` in id order (``in_id_order``): every array follows it."""
        return {"owner": self.owner, "ids": [f.id for f in items],
                "attempts": [f.attempt for f in items], "kinds": [f.kind for f in items],
                "messages": [f.message for f in items],
                "tracebacks": [f.traceback for f in items]}

    def _fenced(self, what: str, sql: str, params: dict, items: Sequence[FencedRow],
                expected: frozenset[int] | set[int] = frozenset()) -> list[int]:
        written = {row[0] for row in self.connection.execute(sql, params, prepare=False)}
        return self._report_fenced(what, items, written, expected)

    @staticmethod
    def _report_fenced(what: str, items: Sequence[FencedRow], written: set[int],
                       expected: frozenset[int] | set[int] = frozenset()) -> list[int]:
        ids = [item.id for item in items]
        fenced = [i for i in ids if i not in written]
        if [i for i in fenced if i not in expected]:
            log.warning("%s: %d job(s) fenced off (lease moved on): %s", what, len(fenced),
                        fenced[:20])
        return fenced


def _attempt_params(owner: str, items: Sequence[FencedRow]) -> dict[str, Any]:
    """The parameters of a fenced write that names attempts only; ``items`` in id order
    (``in_id_order``)."""
    return {"owner": owner, "ids": [a.id for a in items],
            "attempts": [a.attempt for a in items]}


def _json_or_none(value: object) -> str | None:
    return None if value is None else orjson.dumps(value).decode()
