"""``drain()``: run the due jobs of some queues in the calling process, one after another,
until none is due, without ``supervisor run``.

Each job goes the way a supervisor takes it: the parent's own claim statement (a lease
in this drain's name; paused queues are not claimed, ``max_attempts`` resolved from the
handler), its start recorded, the child's code path (``workers.execution.JobExecutor``;
with ``fork=True`` a real forked child), and its outcome written by the parent's outbox
through the same fenced statements (results, errors, retries with backoff, ``Discard``,
``Retry``, ``Snooze``). Batch callbacks and dependents are the database's doing (schema
0006's trigger), so they follow as they do in production, and a callback enqueued
during the drain runs in it when its queue is drained.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import time
import uuid
import warnings
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import orjson
import psycopg

from shared import defaults, jobs, wire
from shared.frames import FrameReader
from shared.jobs import ClaimedJob
from supervisor.db import Attempt, Database, Renewal, Store, StoreSettings
from supervisor.engine import Outbox, handler_max_attempts, resolve_timeout, retry_delay
from supervisor.observe import SupervisorMetrics
from supervisor.testing.connection import checked_schema, connection, dsn_of, environment_dsn
from workers import tracing
from workers.context import JobContext
from workers.execution import JobExecutor, one_line
from workers.registry import REGISTRY

log = logging.getLogger("supervisor.testing")

LEASE_TTL = 3600.0  # nobody renews a drained job's lease; it must outlast the handler
RUNS_PER_JOB_LIMIT = 1000  # one job run this often in one drain: it snoozes for ever

# A job's state after its outcome was written, as the summary words it.
_OUTCOMES = {"completed": "completed", "retryable": "failed", "available": "failed",
             "discarded": "discarded", "scheduled": "snoozed", "cancelled": "cancelled"}

_QUEUES_WITH_WORK = """
SELECT queue FROM supervisor.jobs
WHERE state = 'available' AND run_at <= now() AND kind = ANY(%(kinds)s::text[])
  AND (expires_at IS NULL OR expires_at > now())  -- never handed out (issue 28)
  AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
GROUP BY queue
ORDER BY min(priority), min(run_at), queue
"""

_UNHANDLED = """
SELECT kind, count(*) FROM supervisor.jobs
WHERE state = 'available' AND run_at <= now() AND NOT (kind = ANY(%(handled)s::text[]))
  AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
  AND (%(kinds)s::text[] IS NULL OR kind = ANY(%(kinds)s::text[]))
GROUP BY kind ORDER BY kind
"""

_AFTER = "SELECT state, result::text, errors -> -1 FROM supervisor.jobs WHERE id = %(id)s"


@dataclass(frozen=True, slots=True)
class DrainedJob:
    """One attempt the drain ran. ``outcome``: ``completed``, ``failed`` (will be
    retried), ``discarded``, ``snoozed`` or ``cancelled``: the job's state once the
    outcome was written. ``result`` is the stored result (decoded JSON) of a completed
    job; ``error`` the ``kind: message`` of a failed attempt."""

    id: int
    kind: str
    queue: str
    attempt: int
    outcome: str
    result: Any = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class KindCounts:
    """Attempts of one kind by outcome."""

    completed: int = 0
    failed: int = 0
    discarded: int = 0
    snoozed: int = 0
    cancelled: int = 0


@dataclass(frozen=True)
class DrainSummary:
    """What ``drain()`` did: every attempt in the order it ran, counts by outcome and
    by kind, and ``unhandled``: jobs due in the drained queues whose kind no imported
    handler serves (kind -> count), left waiting as a supervisor leaves them."""

    attempts: tuple[DrainedJob, ...] = ()
    unhandled: Mapping[str, int] = field(default_factory=dict)

    def _count(self, outcome: str) -> int:
        return sum(1 for a in self.attempts if a.outcome == outcome)

    @property
    def ran(self) -> int:
        """Attempts run."""
        return len(self.attempts)

    @property
    def completed(self) -> int:
        """Attempts that completed their job."""
        return self._count("completed")

    @property
    def failed(self) -> int:
        """Attempts that failed and left their job to be retried."""
        return self._count("failed")

    @property
    def discarded(self) -> int:
        """Attempts that discarded their job (``Discard``, bad args, attempts used up)."""
        return self._count("discarded")

    @property
    def snoozed(self) -> int:
        """Attempts that snoozed (``Snooze``): due again later, attempt unspent."""
        return self._count("snoozed")

    @property
    def cancelled(self) -> int:
        """Attempts whose job was cancelled while it ran."""
        return self._count("cancelled")

    @property
    def by_kind(self) -> dict[str, KindCounts]:
        """Counts by outcome for each kind that ran."""
        counts: dict[str, Counter] = {}
        for a in self.attempts:
            counts.setdefault(a.kind, Counter())[a.outcome] += 1
        return {kind: KindCounts(**c) for kind, c in counts.items()}

    def __str__(self) -> str:
        text = (f"{self.ran} ran: {self.completed} completed, {self.failed} failed, "
                f"{self.discarded} discarded, {self.snoozed} snoozed")
        if self.unhandled:
            text += "; no handler for " + ", ".join(
                f"{kind} ({n})" for kind, n in self.unhandled.items())
        return text


class _DirectDatabase:
    """What the outbox asks of ``supervisor.db.Database``, on one connection: a
    statement error is raised to the test, not logged and retried."""

    up = True

    def __init__(self, store: Store) -> None:
        self.store = store

    def call(self, what: Any, default: Any, operation: str = "query") -> Any:
        return what(self.store)


def drain(queues: Iterable[str] | str | None = None, kinds: Iterable[Any] | None = None,
          conn: psycopg.Connection | None = None, fork: bool = False,
          max_jobs: int | None = None, *, skip_backoff: bool = True,
          dsn: str | None = None) -> DrainSummary:
    """Run the available, due jobs of ``queues`` (default: every queue) whose kind has an
    imported handler (and is among ``kinds``, names or ``@job`` handles, when given), one
    after another in claim order, until none is due or ``max_jobs`` attempts ran.
    Returns a ``DrainSummary``.

    Jobs that become due meanwhile run too: a retry, a batch's callback, a dependent
    whose dependencies completed. ``skip_backoff`` (default): a failed attempt is due
    again at once instead of after its backoff, so one drain runs a failing job up to
    its ``max_attempts``; a handler's own ``Retry(delay=...)`` and ``Snooze(...)`` are
    honoured (the job waits, and the drain ends without it). ``skip_backoff=False``
    keeps the backoff.

    ``fork=True`` runs each job in a child forked for it, as ``supervisor run`` does
    (its soft and hard timeouts apply, a crash fails the attempt); otherwise in this
    process, where timeouts do not apply. ``conn``: work on this connection (its writes
    commit as they would in a supervisor when it is in autocommit); else on one of its
    own to ``dsn`` or the environment's database. A database without the schema raises
    ``SchemaMissing`` (run ``supervisor migrate``)."""
    if max_jobs is not None and max_jobs < 0:
        raise ValueError("max_jobs must be >= 0")
    queue_list = _names("queues", [queues] if isinstance(queues, str) else queues)
    kind_list = _names("kinds", kinds)
    with connection(conn, dsn) as c:
        checked_schema(c)
        handled = sorted(k for k in REGISTRY if kind_list is None or k in kind_list)
        with environment_dsn(dsn_of(c)):
            attempts = _Drain(c, handled, queue_list, fork, skip_backoff).run(max_jobs)
        unhandled = dict(c.execute(_UNHANDLED, {"handled": handled, "queues": queue_list,
                                                "kinds": kind_list}).fetchall())
    summary = DrainSummary(tuple(attempts), unhandled)
    if unhandled:
        warnings.warn(f"drain: no handler imported for {', '.join(unhandled)}; "
                      f"{sum(unhandled.values())} job(s) left waiting", stacklevel=2)
    return summary


@functools.cache
def _metrics() -> SupervisorMetrics:
    """Counters the outbox records into; nobody reads them in a test."""
    return SupervisorMetrics("testing")


def _names(what: str, values: Iterable[Any] | None) -> list[str] | None:
    if values is None:
        return None
    names = [getattr(v, "kind", v) for v in values]
    bad = [n for n in names if not isinstance(n, str)]
    if bad:
        raise TypeError(f"{what} must be names (or @job handles), not {bad[0]!r}")
    return names


class _Drain:
    """One drain: claims, runs and writes jobs one at a time."""

    def __init__(self, conn: psycopg.Connection, handled: list[str],
                 queues: list[str] | None, fork: bool, skip_backoff: bool) -> None:
        self.conn = conn
        self.handled = handled
        self.queues = queues
        self.fork = fork
        self.skip_backoff = skip_backoff
        owner = f"testing-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.store = Store(conn, owner, lease_ttl=LEASE_TTL,
                           settings=StoreSettings(max_attempts=handler_max_attempts(handled)))
        self.outbox = Outbox(_metrics(), flush_interval=0.0)
        self.database = _DirectDatabase(self.store)
        self.contexts: list[JobContext] = []
        self.executor = JobExecutor(begin=self.contexts.append, keep_exception=True,
                                    send_checkpoint=self._checkpoint_here)
        self._attempts: dict[int, int] = {}  # job id -> attempt, of the job run here
        self.run_here = tracing.traced(self.executor.run)  # itself unless otel is on

    def run(self, max_jobs: int | None) -> list[DrainedJob]:
        done: list[DrainedJob] = []
        runs: Counter = Counter()
        while max_jobs is None or len(done) < max_jobs:
            job = self._claim_next()
            if job is None:
                break
            runs[job.id] += 1
            if runs[job.id] > RUNS_PER_JOB_LIMIT:
                self.store.release([Attempt(job.id, job.attempt)])
                raise RuntimeError(f"job {job.id} ({job.kind}) ran {RUNS_PER_JOB_LIMIT} times "
                                   "in one drain (a Snooze(0) loop?); pass max_jobs")
            done.append(self._run_one(job))
        return done

    def _claim_next(self) -> ClaimedJob | None:
        if not self.handled:
            return None
        self.store.promote_due()  # retries and snoozes whose time came, as maintenance does
        params = {"kinds": self.handled, "queues": self.queues}
        for (queue,) in self.conn.execute(_QUEUES_WITH_WORK, params).fetchall():
            claimed = self.store.claim(queue, self.handled, 1)
            if claimed:
                return claimed[0]
        return None

    def _run_one(self, job: ClaimedJob) -> DrainedJob:
        self.store.started([Attempt(job.id, job.attempt)])
        try:
            if self.fork:
                from supervisor.testing.forked import run_forked

                answer = run_forked(job, resolve_timeout(job, defaults.JOB_TIMEOUT),
                                    lambda progress: self._progress(job, progress),
                                    lambda state: self._checkpoint(job, state))
            else:
                answer = self._run_here(job)
        except BaseException as exc:
            # Ctrl-C, or pytest's own outcome (a timeout, pytest.fail or skip in the
            # handler): it belongs to the test, not to the job. The job goes back as at a
            # supervisor's shutdown (attempt not counted) and the test sees the exception.
            self._write(job, wire.Failed(job.id, jobs.FAIL_SHUTDOWN,
                                         f"interrupted in a test: {one_line(exc)}"))
            raise
        self._write(job, answer)
        row = self.conn.execute(_AFTER, {"id": job.id}).fetchone()
        assert row is not None  # the job just claimed and written is still there
        state: str
        state, result, last_error = row
        outcome = _OUTCOMES.get(state, state)
        error = None
        if isinstance(answer, wire.Failed) and outcome != "snoozed":
            error = f"{answer.kind}: {answer.message}"
            if isinstance(last_error, dict) and last_error.get("attempt") == job.attempt:
                error = f"{last_error.get('kind')}: {last_error.get('message')}"
        return DrainedJob(job.id, job.kind, job.queue, job.attempt, outcome,
                          None if result is None else orjson.loads(result), error)

    def _run_here(self, job: ClaimedJob) -> wire.Done | wire.Failed:
        # The RUN frame the parent would send, decoded as the child decodes it (args
        # that do not parse become the job's failure, not the drain's).
        data = wire.Run.pack(job.id, job.kind, job.queue, job.attempt, job.max_attempts,
                             job.args_json, job.trace_context, job.checkpoint,
                             job.expires_at)
        run = wire.Run.decode(FrameReader().feed(data)[0])
        self._attempts = {job.id: job.attempt}
        self.contexts.clear()
        self.executor.raised = None
        answer = self.run_here(run)
        for context in self.contexts:  # progress: what a heartbeat would have carried
            _, report = context.take_progress(0)
            if report is not None:
                self._progress(job, report)
        raised, self.executor.raised = self.executor.raised, None
        if isinstance(raised, BaseException) and not isinstance(raised, Exception | SystemExit):
            raise raised  # the child booked it as the job's failure; it is the test's
        return answer

    def _progress(self, job: ClaimedJob, report: dict) -> None:
        self.store.renew([Renewal(job.id, job.attempt, progress=report)])

    def _checkpoint(self, job: ClaimedJob, state_json: str) -> None:
        """A checkpoint, written at once (fenced like a supervisor's)."""
        self.store.renew([Renewal(job.id, job.attempt, checkpoint=state_json)])

    def _checkpoint_here(self, job_id: int, state: bytes, flush: bool) -> None:
        attempt = self._attempts.get(job_id)
        if attempt is not None:
            self.store.renew([Renewal(job_id, attempt, checkpoint=state.decode())])

    def _write(self, job: ClaimedJob, answer: wire.Done | wire.Failed) -> None:
        """The outcome, booked as ``supervisor.engine.reporting`` books it."""
        now = time.monotonic()
        if isinstance(answer, wire.Done):
            self.outbox.completed(job, answer.result.decode(), now)
        elif answer.kind == jobs.FAIL_SNOOZE:
            self.outbox.failed(job, answer.kind, answer.message, None, answer.retry_delay,
                               False, now)
        else:
            delay = retry_delay(job, answer.retry_delay)
            if self.skip_backoff and answer.retry_delay is None:
                delay = 0.0
            log.debug("job %d %s attempt %d/%d failed (%s): %s", job.id, job.kind,
                      job.attempt, job.max_attempts, answer.kind, answer.message)
            self.outbox.failed(job, answer.kind, answer.message, answer.traceback, delay,
                               False, now)
        # The cast: _DirectDatabase has what flush uses of a Database (call, up), no more.
        self.outbox.flush(cast(Database, self.database), now)
        # In-process runs crash no child, so no row judges poison: nothing to say of them.
        self.outbox.take_failures_written()

