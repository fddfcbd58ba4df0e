"""Claiming: what can start now, without stopping the loop while the database answers.

One claim is in flight at a time, on the non-blocking claim connection, and it carries
the completions the outbox hands it (one statement, one commit). While it is out, the
loop keeps reading children's answers and handing them waiting jobs. When several
queues want work, the one that claimed least recently goes first, so no queue waits
behind a busy neighbour. The answer puts the claimed jobs in the ledger; a claim
answered after the drain began gives its jobs straight back. A plain claim (no aging, no
per-key limit) starts its scan at its queue's cursor (``supervisor.engine.cursors``).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Collection, Mapping

import psycopg

from shared.jobs import ClaimedJob
from supervisor.admission import Admission
from supervisor.db import ClaimBounds, ClaimRequest, ClaimResult, Database, connection_lost
from supervisor.db import refused as refused_data
from supervisor.engine.cursors import ClaimCursors
from supervisor.engine.ledger import Ledger
from supervisor.engine.outbox import Outbox
from supervisor.engine.planner import Scheduler
from supervisor.engine.policy import (
    fill_reservation,
    handler_reservations,
    resolve_heartbeat_timeout,
    resolve_timeout,
)
from supervisor.observe import JobTracer, SupervisorMetrics
from supervisor.pool import RunTimes

log = logging.getLogger("supervisor.claimer")


class Claimer:
    """Plans claims with the scheduler and makes them; claimed jobs go to the ledger."""

    def __init__(self, db: Database, scheduler: Scheduler, ledger: Ledger, outbox: Outbox,
                 metrics: SupervisorMetrics, kinds: list[str],
                 default_timeout: float | None, clock=time.monotonic,
                 tracer: JobTracer | None = None, admission: Admission | None = None,
                 run_times: RunTimes | None = None) -> None:
        self.db = db
        self.run_times = run_times  # how long each queue's jobs run: see ``coming``
        self.admission = admission  # notes declared jobs; sends back those beyond budget
        self.tracer = tracer  # None unless the otel extra is on
        self.scheduler = scheduler
        self.ledger = ledger
        self.outbox = outbox
        self.metrics = metrics
        self.kinds = kinds
        self.default_timeout = default_timeout
        # Each loaded handler's @job(cpus, memory, resources): what a job whose row
        # leaves them out reserves.
        self.kind_reservations = handler_reservations(kinds)
        self.clock = clock
        self.accepting = True  # False once draining: late answers go straight back
        self.in_flight: tuple[str, int] | None = None  # (queue, jobs asked for)
        self.answers = 0  # claims answered (or failed) so far
        self._order = itertools.count()
        self._last_turn: dict[str, int] = {}
        self.cursors = ClaimCursors()

    def coming(self, busy: int) -> bool:
        """A claim will be sent as the running jobs end: some queue has work and a
        child is busy (each job that ends frees a place the claim fills), and the next
        claim comes soon (``_claim_soon``). Completions wait a little for it
        (``tuning.claim_carry_wait``) rather than force a claim of one or two jobs, or a
        write of their own."""
        demand, run_times = self.scheduler.demand, self.run_times
        if not (self.accepting and demand and busy > 0) or run_times is None:
            return False
        average = run_times.average
        for queue in demand:  # a plain loop: asked a few times every turn (issue 43)
            run_time = average.get(queue)
            if run_time is None or not self._claim_soon(queue, run_time, busy):
                return False
        return True

    def _claim_soon(self, queue: str, run_time: float, busy: int) -> bool:
        """Whether ``queue``'s next claim comes within ``tuning.claim_carry_wait``:
        always for jobs shorter than ``tuning.long_job``; for longer ones only with a
        pipe of two (the child that ends has its next job queued, so none waits for the
        claim: without one, the claims a wait saved let a child wait for the next claim,
        and 100 ms runs were slower in 3 of 4 runs) and when the ``busy`` children end
        another job well within the wait (``tuning.claim_soon_share`` of it). At 100 ms
        jobs on ``-n 2`` a completion carried alone at once cost a claim per job
        instead of one per 2.7 (issue 43)."""
        tuning = self.scheduler.tuning
        if run_time < tuning.long_job:
            return True
        if busy * tuning.claim_carry_wait * tuning.claim_soon_share < run_time:
            return False
        planner = self.scheduler
        return planner.depth.pipeline(queue, planner.policies[queue].prefetch) > 1

    def carries_alone(self, busy: int, window: float) -> bool:
        """A completion waiting now would be the only one its write carries: no claim
        comes soon for any queue with work (``_claim_soon``), and the ``busy`` children
        are expected to end fewer than one more job within ``window`` (the flush
        interval). Then waiting out the window batches nothing and costs the loop a
        timer wake per job (issue 43): the claim that carries it goes at once. With many
        children (``-n 16`` of 100 ms jobs end one every 6 ms) the window still batches,
        and this is False."""
        demand, run_times = self.scheduler.demand, self.run_times
        if not (self.accepting and demand) or run_times is None:
            return False
        for queue in demand:
            run_time = run_times.queue_average(queue)
            if (run_time is None or busy * window >= run_time
                    or self._claim_soon(queue, run_time, busy)):
                return False
        return True

    @property
    def can_send(self) -> bool:
        """A claim may be sent now: none is in flight, claiming has not stopped for a
        drain, and the claim connection is open."""
        return self.in_flight is None and self.accepting and self.db.claims is not None

    def claim(self, now: float, pool_size: int, eager: bool = False,
              set_aside: Mapping[str, int] | None = None,
              batches_held: Callable[[str], Collection[int]] | None = None) -> None:
        """Make the claim that is due, if none is in flight. ``eager``: outcomes are
        due to be written anyway, so even a small claim is worth its statement.
        ``set_aside``: jobs per queue held by children left out of ``pool_size``
        (stuck on a long job): they occupy no child of those the claim is sized for.
        ``batches_held(queue)``: the batches of a fair queue this supervisor holds jobs
        of (a fair claim serves the others first at equal turn)."""
        runner = self.db.claims
        if self.in_flight is not None or not self.accepting or runner is None:
            return  # ``can_send`` is False
        outstanding = self.ledger.outstanding()
        for queue, count in (set_aside or {}).items():
            outstanding[queue] = max(0, outstanding.get(queue, 0) - count)
        # Jobs queued in children's pipes count as waiting: held, not started.
        plans = self.scheduler.plan_claims(now, pool_size, outstanding,
                                           self.ledger.unstarted_counts(), eager)
        if not plans:
            return
        plans.sort(key=lambda plan: self._last_turn.get(plan[0], -1))
        queue, wanted = plans[0]
        for other, tokens in plans[1:]:
            self.scheduler.unplanned(other, tokens)
        self._last_turn[queue] = next(self._order)
        aging, per_key = self.scheduler.aging(queue), self.scheduler.per_key(queue)
        fair = self.scheduler.fair(queue)
        plain = aging <= 0 and per_key is None and not fair
        fair_start = self.cursors.fair_start(queue) if fair and per_key is None else None
        held = (sorted(batches_held(queue)) if fair_start is not None and batches_held
                else ())
        request = ClaimRequest(queue, self.kinds, wanted, aging, per_key,
                               self.outbox.take_completions(), self.outbox.take_starts(now),
                               self._bounds(),
                               self.cursors.start(queue) if plain
                               else fair_start.loose if fair_start else None,
                               fair=fair,
                               first_batch=fair_start.first_batch if fair_start else None,
                               batch_starts=fair_start.batches if fair_start else {},
                               held_batches=held)
        self._send(request, queue)

    def _send(self, request: ClaimRequest, queue: str) -> None:
        """Send ``request`` on the claim connection; its answer is booked by ``_answered``."""
        runner = self.db.claims
        assert runner is not None  # ``can_send`` was checked
        started = time.perf_counter()
        self.in_flight = (queue, request.limit)
        traced_at = self.tracer.now() if self.tracer is not None else 0

        def answered(outcome: ClaimResult | Exception) -> None:
            if isinstance(outcome, Exception):
                self.outbox.hand_back_starts(request.starts, self.clock())
            claimed = self._answered(request, started, outcome)
            if self.tracer is not None:
                self.tracer.claimed(queue, claimed, [c.id for c in request.completions],
                                    traced_at,
                                    outcome if isinstance(outcome, Exception) else None)

        try:
            self.db.store.send_claim(runner, request, answered)
        except psycopg.Error as exc:
            answered(exc)

    def carry(self, now: float, queue: str) -> bool:
        """Send the waiting completions and starts on the claim connection in a claim of
        no job, when only those wait (``Outbox.carries_alone``) and no claim is out:
        the write every short job needs, made without holding the loop. A blocking write
        of a few hundred completions took 100-500 ms on a busy server, and the children
        ran dry behind it (issue 48). Returns whether it was sent."""
        if not self.can_send or not self.outbox.carries_alone():
            return False
        request = ClaimRequest(queue, self.kinds, 0, completions=self.outbox.take_completions(),
                               starts=self.outbox.take_starts(now))
        if not request.writes:
            return False
        self._send(request, queue)
        return True

    def _bounds(self) -> ClaimBounds | None:
        """What a job may reserve to be claimed here, once admission met one it can never
        hold (None before: the claim stays the measured statement)."""
        bounds = self.admission.bounds() if self.admission is not None else None
        return None if bounds is None else ClaimBounds(*bounds)

    def _answered(self, request: ClaimRequest, started: float,
                  outcome: ClaimResult | Exception) -> list[ClaimedJob]:
        """Book the claim's answer; returns the jobs it took."""
        self.in_flight = None
        self.answers += 1
        queue, wanted, completions = request.queue, request.limit, request.completions
        if isinstance(outcome, Exception):
            if request.limit:  # a carry planned nothing
                self.scheduler.unplanned(queue, wanted)
            # Refused for its data (class 22, 23 or 54: supervisor.db.refused), as a
            # carried result can be: the completions are written alone, row by row.
            refused = refused_data(outcome) and bool(completions)
            self.outbox.hand_back(list(completions), self.clock(), refused=refused)
            if connection_lost(outcome):
                self.db.lost(outcome)
            elif not refused:
                self.db.failed(f"claim for queue {queue!r}", outcome)
            return []
        fenced, claimed = outcome.fenced, outcome.jobs
        if request.limit == 0:  # a carry (``carry``): writes only, nothing planned
            if fenced:
                self.metrics.fenced("complete", len(fenced))
            return claimed
        if request.per_key is None and request.fair:
            self.cursors.fair_claimed(queue, claimed, wanted)
        elif request.aging <= 0 and request.per_key is None:
            self.cursors.claimed(queue, claimed)
        if fenced:
            self.metrics.fenced("complete", len(fenced))
        took = time.perf_counter() - started
        self.metrics.claimed(queue, len(claimed), took, [job.wait_seconds for job in claimed])
        self.scheduler.depth.claimed(took)
        if not claimed:
            self.metrics.claim_empty(queue)
        self.scheduler.claimed(queue, wanted, len(claimed))
        if not self.accepting:
            self.outbox.released(claimed, self.clock())
            return claimed
        for job in claimed:
            job.timeout = resolve_timeout(job, self.default_timeout)
            job.heartbeat_timeout = resolve_heartbeat_timeout(job)
            if self.kind_reservations:
                fill_reservation(job, self.kind_reservations.get(job.kind))
        if self.admission is not None:
            beyond = self.admission.claimed(claimed)
            if beyond:  # never fits here: back for a supervisor that can hold it
                for job in beyond:
                    log.info("job %d %s %s: left for another supervisor", job.id, job.kind,
                             self.admission.too_big[job.id])
                self.outbox.released(beyond, self.clock())
                claimed = [job for job in claimed if job not in beyond]
        self.ledger.add_claimed(claimed)
        return claimed
