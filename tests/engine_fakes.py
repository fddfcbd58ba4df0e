"""Fakes for the engine's unit tests: a store that keeps jobs in memory and records
every statement, the real ``Database`` wrapped around it (so outage and error handling
are the real code), a claim connection the test answers by hand, and a pool.
"""

from __future__ import annotations

import selectors
from collections import Counter, deque

import psycopg

from shared.db import DatabaseUnavailable
from shared.horizon import HorizonReport
from shared.jobs import ClaimedJob
from supervisor.config import RunConfig
from supervisor.db import ClaimKey, ClaimResult, Database, FailuresWritten, LaterWork, LeadRound
from supervisor.engine import Engine
from supervisor.observe.metrics import SupervisorMetrics
from supervisor.pool import JobDone, JobFailed, JobStarted, RunTimes
from supervisor.pool.runtimes import ran_for


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class FakeConn:
    def close(self) -> None:
        pass


class FakeStore:
    """Jobs per queue in memory; ``calls`` lists every statement as (name, payload)."""

    def horizon(self) -> HorizonReport:
        return HorizonReport(None, 0, 0)  # nothing holds a snapshot here

    def discard_plans(self) -> None:
        self._record("discard_plans")

    def __init__(self) -> None:
        self.conn = FakeConn()
        self.available: dict[str, deque[ClaimedJob]] = {}
        self.calls: list[tuple[str, object]] = []
        self.fail_next: dict[str, Exception] = {}  # statement name -> error raised once
        self.fence: set[int] = set()  # ids whose writes are fenced off
        self.paused: set[str] = set()
        self.stop_running: set[str] = set()  # paused with --stop-running
        self._next_id = 1

    def add(self, queue: str = "default", n: int = 1, kind: str = "k") -> list[int]:
        ids = []
        for _ in range(n):
            job = ClaimedJob(self._next_id, kind, queue, 1, 5, 0, None, "{}")
            self.available.setdefault(queue, deque()).append(job)
            ids.append(job.id)
            self._next_id += 1
        return ids

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def _record(self, name: str, payload: object = None) -> None:
        error = self.fail_next.pop(name, None)
        if error is not None:
            raise error
        self.calls.append((name, payload))

    def _fenced(self, ids) -> list[int]:
        return [i for i in ids if i in self.fence]

    # -- the claim (run through FakeClaims) ----------------------------------------------
    def send_claim(self, runner, request, callback):
        params = {"completions": list(request.completions), "queue": request.queue,
                  "limit": request.limit, "starts": list(request.starts),
                  "kinds": list(request.kinds)}

        def answered(outcome):
            if isinstance(outcome, Exception):
                callback(outcome)
            else:
                callback(ClaimResult(outcome, self._fenced(c.id for c in request.completions)))

        runner.send(None, params, answered)

    def take(self, queue: str, limit: int) -> list[ClaimedJob]:
        jobs = self.available.get(queue, deque())
        return [jobs.popleft() for _ in range(min(limit, len(jobs)))]

    # -- blocking statements -----------------------------------------------------------
    def complete(self, items):
        self._record("complete", [c.id for c in items])
        return self._fenced(c.id for c in items)

    def fail(self, items):
        return self.write_failures(items).fenced

    def write_failures(self, items):
        self._record("fail", [(f.id, f.kind) for f in items])
        fenced = set(self._fenced(f.id for f in items))
        return FailuresWritten(items, frozenset(f.id for f in items if f.id not in fenced),
                               frozenset())  # no row here repeats a crash: never poison

    def interrupt(self, items):
        self._record("interrupt", [f.id for f in items])
        return self._fenced(f.id for f in items)

    def release(self, items):
        self._record("release", [a.id for a in items])
        return self._fenced(a.id for a in items)

    def started(self, items):
        self._record("started", sorted(a.id for a in items))

    def renew(self, items):
        self._record("renew", [a.id for a in items])
        return self._fenced(a.id for a in items)

    def reconcile(self, held):
        self._record("reconcile", sorted(held))
        return []

    def promote_due(self, limit: int = 1000) -> int:
        self._record("promote")
        return 0

    def queues_with_work(self, queues, kinds, starts=None):
        self._record("poll")
        return {q: ClaimKey(0, 0.0) for q in queues if self.available.get(q)}

    def seconds_until_due(self, queues, kinds):
        return None

    def paused_kinds(self):
        return {}

    def record_crashes(self, kinds, limits):
        return []

    def queue_pauses(self, queues):
        self._record("paused")
        return {q: q in self.stop_running for q in self.paused}

    def left_for_later(self, queues, kinds):
        return LaterWork()

    def unhandled_waiting(self, queues, kinds) -> dict[str, int]:
        return {}

    def has_due_work(self, queues, kinds, horizon=0.0) -> bool:
        self._record("has_due_work")
        return any(self.available.get(q) for q in queues)

    def beat(self, *args) -> None:
        self._record("beat")

    def lead_chores(self, key, stale_after, rescue_floor=float("-inf")):
        self._record("lead")
        return LeadRound([], 0.0, True)

    def expire(self, batch) -> int:
        return 0  # no job here carries an expires_at

    def prune(self, prune) -> int:
        return 0

    def prune_batches(self, prune) -> int:
        return 0

    def read_limits(self, queues):  # no global limits here (tests/test_limits_*.py)
        return {}

    def return_leases(self, queues=None) -> None:
        pass

    def leave(self) -> None:
        self._record("leave")

    def queue_counts(self, queues):
        return {}


class FakeClaims:
    """The non-blocking claim connection: ``send`` records, the test answers."""

    def __init__(self, store: FakeStore, clock: Clock) -> None:
        self.store = store
        self.clock = clock
        self.conn = FakeConn()
        self.sent: list[tuple[dict, object]] = []
        self.sent_at = 0.0
        self.discards = 0  # times fresh plans were asked for

    @property
    def busy(self) -> bool:
        return bool(self.sent)

    def send(self, statement, params, callback) -> None:
        self.sent.append((params, callback))
        self.sent_at = self.clock.now

    def discard_plans(self) -> None:
        self.discards += 1

    def answer(self) -> list[ClaimedJob]:
        """The server claims what it has for the oldest sent claim and answers."""
        params, callback = self.sent.pop(0)
        claimed = self.store.take(params["queue"], params["limit"])
        callback(claimed)
        return claimed

    def fail(self, error: Exception) -> None:
        _params, callback = self.sent.pop(0)
        callback(error)

    def abandon(self):
        if not self.sent:
            return None
        _, callback = self.sent.pop(0)
        return callback


class FakeDatabase(Database):
    """The real Database (call, outage, backoff) over a FakeStore; ``server_up``
    decides whether (re)connecting works."""

    def __init__(self, store: FakeStore, clock: Clock) -> None:
        super().__init__("postgresql://app@db.example/app", "me", 30.0,
                         selectors.DefaultSelector(), statement_timeout=5.0, clock=clock)
        self.fake_store = store
        self.server_up = True
        self.opened = 0

    def open(self, connect_within: float | None = None, *, check_schema: bool = False) -> None:
        if not self.server_up:
            raise DatabaseUnavailable("cannot connect to PostgreSQL at db.example")
        self.opened += 1
        self.store = self.fake_store
        self.store.conn = FakeConn()
        self.claims = FakeClaims(self.fake_store, self.clock)

    def _start_attempt(self, now: float) -> list:
        self.open()  # at once, or DatabaseUnavailable
        return []

    def break_connection(self) -> None:
        """The server went away: the next use finds out."""
        self.lost(psycopg.OperationalError("server closed the connection unexpectedly"))


class FakePool:
    """Children as counters; the test finishes their jobs."""

    def __init__(self, size: int = 2, run_times: RunTimes | None = None) -> None:
        self._size = size
        # Fed at each answer taken, as the pool feeds the engine's at each it reads.
        self.run_times = run_times if run_times is not None else RunTimes()
        self.idle = size
        self.jobs: dict[int, ClaimedJob] = {}
        self.outcomes: list = []
        self.cancelled: list[int] = []
        self.notified: list[tuple[int, str]] = []
        self.acked: list[tuple[int, bool]] = []
        self.stuck = 0
        self.rebalanced: list[bool] = []  # per call of rebalance: was "default" done

    def size(self) -> int:
        return self._size

    def idle_count(self) -> int:
        return self.idle

    def busy_count(self) -> int:
        return len(self.jobs)

    def native_jobs(self, now: float) -> list:
        return []  # no child is busy in native code here

    def held_count(self) -> int:
        return len(self.jobs)

    def child_reports(self) -> list:
        return []  # no processes: nothing to say of them

    def overrunning(self) -> int:
        return self.stuck  # children whose job ran past its kind's p95 (set by a test)

    def overrunning_heads(self) -> Counter:
        # The first ``stuck`` children's jobs are the overrunning ones.
        return Counter(job.queue for job in list(self.jobs.values())[:self.stuck])

    def occupied(self) -> Counter:
        return Counter(job.queue for job in self.jobs.values())  # one job per child

    def dispatch(self, job: ClaimedJob, depth: int = 1, *, own_queue: bool = False) -> bool:
        if self.idle == 0 or own_queue:  # no pipes here: only idle children take jobs
            return False
        self.idle -= 1
        self.jobs[job.id] = job
        self.outcomes.append(JobStarted(job))  # an idle child says START at once
        return True

    def free_for(self, over, wanted: int) -> int:
        return 0  # no pipes here: nothing is queued behind a running job

    def rebalance(self, exhausted) -> int:
        """No pipes here: records whether the engine says "default" has nothing more to
        claim, and gives nothing back."""
        self.rebalanced.append(exhausted("default"))
        return 0

    def push(self) -> None:
        pass

    def take_back(self, queue: str) -> int:
        return 0  # its children hold nothing queued

    def running(self) -> list[ClaimedJob]:
        return list(self.jobs.values())

    def cancel(self, job_id: int) -> bool:
        self.cancelled.append(job_id)
        return job_id in self.jobs

    def interrupt_all(self, kind: str = "shutdown") -> None:
        for job_id in list(self.jobs):
            self.fail(job_id, kind)

    def running_since(self) -> list[tuple[ClaimedJob, float]]:
        return [(job, 0.0) for job in self.jobs.values()]

    def notify(self, job_id: int, reason: str, kind: str, message: str,
               grace: float | None) -> bool:
        """A stop notice its handler ignores: with a grace, the kill that follows it."""
        self.notified.append((job_id, reason))
        if grace is not None and job_id in self.jobs:
            self.fail(job_id, "shutdown")
        return True

    def checkpoint_written(self, job_id: int, written: bool) -> None:
        self.acked.append((job_id, written))

    def take_outcomes(self) -> list:
        taken, self.outcomes = self.outcomes, []
        for outcome in taken:
            if isinstance(outcome, JobDone | JobFailed):
                self.run_times.ran(outcome.job.kind, outcome.job.queue, ran_for(outcome))
        return taken

    def finish(self, job_id: int, result: str = '{"ok": true}') -> None:
        job = self.jobs.pop(job_id)
        self.idle += 1
        self.outcomes.append(JobDone(job, result, 0.01))

    def fail(self, job_id: int, kind: str = "error") -> None:
        job = self.jobs.pop(job_id)
        self.idle += 1
        self.outcomes.append(JobFailed(job, kind, "boom", None, None, False, 0.01))


def make_engine(*, children: int = 2, queues=("default",), burst: bool = False, **settings):
    """An engine over fakes: (engine, database, store, pool, clock)."""
    clock = Clock()
    store = FakeStore()
    db = FakeDatabase(store, clock)
    config = RunConfig(children=children, burst=burst, **settings)
    engine = Engine(config, db.dsn, "me", list(queues), ["k"], SupervisorMetrics("me"),
                    db.selector, clock=clock, database=db)
    engine.open()
    return engine, db, store, FakePool(children, engine.run_times), clock
