"""Claiming: what can start now, without stopping the loop while the database answers.

One claim is in flight at a time, on the non-blocking connection, and it carries the
completions of the jobs that finished since the last one (one statement, one commit).
While it is out, the loop keeps reading children's answers and handing them waiting
jobs. When several queues want work, the one that claimed least recently goes first,
so no queue waits behind a busy neighbour. If the non-blocking connection is away the
claim is made inline on the work connection.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable

import psycopg

from supervisor.db.database import CONNECTION_ERRORS, Database
from supervisor.db.sql import claim_statements
from supervisor.db.store import Completion
from supervisor.engine.ledger import Ledger, PendingWrites
from supervisor.engine.outbox import claim_carrying_completions, write_pending
from supervisor.engine.planner import Scheduler
from supervisor.engine.policy import resolve_timeout
from supervisor.observe.metrics import SupervisorMetrics

log = logging.getLogger("supervisor.claimer")


class Claimer:
    """Plans claims with the scheduler and makes them; claimed jobs go to the ledger."""

    def __init__(self, db: Database, scheduler: Scheduler, ledger: Ledger,
                 metrics: SupervisorMetrics, kinds: list[str],
                 pool_size: Callable[[], int], accepting: Callable[[], bool],
                 on_claimed: Callable[[], None], default_timeout: float | None = None) -> None:
        self.db = db
        self.scheduler = scheduler
        self.ledger = ledger
        self.metrics = metrics
        self.kinds = kinds
        self.pool_size = pool_size
        self.accepting = accepting  # False once draining: late claims go straight back
        self.on_claimed = on_claimed
        self.default_timeout = default_timeout
        self.in_flight: tuple[str, int] | None = None  # (queue, jobs asked for)
        self._order = itertools.count()
        self._last_turn: dict[str, int] = {}

    def claim(self, now: float, eager: bool = False) -> None:
        """Make the claim that is due, if none is in flight."""
        if self.in_flight is not None or not self.db.up:
            return
        outstanding = self.ledger.outstanding()
        plans = self.scheduler.plan_claims(now, self.pool_size(), outstanding,
                                           self.ledger.waiting_counts(), eager)
        if not plans:
            return
        plans.sort(key=lambda plan: self._last_turn.get(plan[0], -1))
        queue, wanted = plans[0]
        for other, tokens in plans[1:]:
            self.scheduler.unplanned(other, tokens)
        self._last_turn[queue] = next(self._order)
        fast = self.db.fast
        if fast is None or fast.busy:
            self._claim_inline(queue, wanted)
            return
        pending = self.ledger.pending
        completions, pending.completions = pending.completions, []
        if not pending.count() and not pending.progress:
            pending.since = None  # nothing left to flush: no busy wake-ups meanwhile
        aging = self.scheduler.aging(queue)
        params = self.db.store.complete_and_claim_params(completions, queue, self.kinds, wanted,
                                                         aging)
        started = time.perf_counter()
        self.in_flight = (queue, wanted)
        try:
            fast.send(claim_statements(aging)[2], params, lambda outcome: self._answered(
                queue, wanted, completions, started, outcome))
        except psycopg.Error as exc:
            self._answered(queue, wanted, completions, started, exc)

    def _claim_inline(self, queue: str, wanted: int) -> None:
        started = time.perf_counter()
        claimed = self.db.call(lambda s: claim_carrying_completions(
            s, self.ledger.pending, queue, self.kinds, wanted, self.scheduler.aging(queue)), None)
        if claimed is None:
            self.scheduler.unplanned(queue, wanted)
            return
        self._took(queue, wanted, claimed, started)

    def _answered(self, queue: str, wanted: int, completions: list[Completion],
                  started: float, outcome: list[tuple] | Exception) -> None:
        self.in_flight = None
        if isinstance(outcome, Exception):
            if isinstance(outcome, psycopg.DataError) and completions:
                # A result Postgres refuses: carried again it would fail every claim.
                # Written job by job now, the bad one becomes that job's failure.
                completions = self._write_one_by_one(completions)
            # Whatever was not written waits for the next write.
            self.ledger.pending.completions[:0] = completions
            if completions and self.ledger.pending.since is None:
                self.ledger.pending.since = time.monotonic()
            self.scheduler.unplanned(queue, wanted)
            if isinstance(outcome, CONNECTION_ERRORS):
                self.db.lost(outcome)
            elif not isinstance(outcome, psycopg.DataError):
                log.error("claim for queue %r failed: %s", queue, outcome)
            return
        fenced, claimed = self.db.store.complete_and_claim_rows(completions, outcome)
        if fenced:
            self.metrics.fenced("complete", len(fenced))
        self._took(queue, wanted, claimed, started)

    def _write_one_by_one(self, completions: list[Completion]) -> list[Completion]:
        leftover = PendingWrites(completions=list(completions))
        self.db.call(lambda store: write_pending(store, leftover), None)
        return leftover.completions

    def _took(self, queue: str, wanted: int, claimed: list, started: float) -> None:
        self.metrics.claimed(queue, len(claimed), time.perf_counter() - started,
                             [job.wait_seconds for job in claimed])
        self.scheduler.claimed(queue, wanted, len(claimed))
        for job in claimed:
            job.timeout = resolve_timeout(job, self.default_timeout)
        self.ledger.add_claimed(claimed)
        if not self.accepting():
            self.ledger.release_waiting(time.monotonic())
        self.on_claimed()
