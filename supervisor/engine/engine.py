"""The job engine: everything between the queue table and the pool.

The arbiter turns the loop and calls ``tick(now, pool)`` once per turn, and sleeps until
``next_deadline()``. Each tick the engine books what the children reported, hands waiting
jobs to idle children, claims what can start now (carrying finished jobs' completions),
writes the other outcomes when due, renews leases, polls, promotes due jobs, runs
maintenance rounds and notices the end of a burst. It never signals or forks anything:
process supervision is the arbiter's and the pool's.

Database outages are ridden out here. While the database is away nothing that needs it
is scheduled (the loop sleeps until the next reconnection attempt, it does not spin).
After a reconnect the engine first writes what it holds, renews its own leases and gives
back rows that a lost claim answer left running under its name; it takes no part in
rescuing expired leases for one lease period, so every live supervisor has renewed its
own jobs before anyone judges them lost.
"""

from __future__ import annotations

import logging
import random
import selectors
import time
from typing import TYPE_CHECKING

from supervisor.db import Database
from supervisor.engine.claims import Claimer
from supervisor.engine.ledger import Ledger
from supervisor.engine.maintenance import Maintenance, MaintenanceSettings
from supervisor.engine.outbox import Outbox
from supervisor.engine.planner import Scheduler
from supervisor.engine.policy import handler_max_attempts
from supervisor.engine.reporting import OutcomeReporter
from supervisor.observe import JobTracer, SupervisorMetrics

if TYPE_CHECKING:  # config imports the allotment, and the pool comes in each tick
    from supervisor.config import RunConfig
    from supervisor.pool import Pool
    from supervisor.schedules import Schedules

log = logging.getLogger("supervisor.engine")

BURST_CHECK_INTERVAL = 0.1
PROMOTE_AGAIN = 0.005  # a job found due during a poll is promoted this soon after
MIN_POLL_GAP = 0.05  # polls asked for by events (NOTIFY, retries) come no closer than this


class Engine:
    """Claims, dispatches, writes and keeps the books for one supervisor."""

    def __init__(self, config: RunConfig, dsn: str, owner: str, queues: list[str],
                 kinds: list[str], metrics: SupervisorMetrics,
                 selector: selectors.BaseSelector, *, clock=time.monotonic,
                 database: Database | None = None, schedules: Schedules | None = None,
                 tracer: JobTracer | None = None) -> None:
        now = clock()
        self.config = config
        self.db = db = database or Database(dsn, owner, config.lease_ttl, selector,
                                            clock=clock,
                                            statement_timeout=config.statement_timeout,
                                            listen=config.listen)
        self.queues = queues
        self.kinds = kinds
        self.metrics = metrics
        self.clock = clock
        self.planner = Scheduler(config, queues, now, clock=clock, metrics=metrics,
                                 owner=owner)
        self.ledger = Ledger()
        self.outbox = Outbox(metrics, config.flush_interval, tracer)
        self.claimer = Claimer(db, self.planner, self.ledger, self.outbox, metrics, kinds,
                               config.default_timeout, clock, tracer)
        self.reporter = OutcomeReporter(self.ledger, self.outbox, metrics, self.planner.depth)
        self.maintenance = Maintenance(
            queues, MaintenanceSettings(interval=config.maintenance_interval,
                                        retention=config.retention,
                                        discarded_retention=config.discarded_retention), clock)
        self.schedules = schedules
        db.store.max_attempts = handler_max_attempts(kinds)
        db.store.default_attempts = config.max_attempts
        self.next_poll = now
        self.last_poll = now - MIN_POLL_GAP
        self.next_promote: float | None = None  # when the next scheduled/retrying job is due
        self.next_renew = now + config.lease_ttl / 3
        self.next_burst_check = now
        self.rescue_hold_until = 0.0
        self.burst_finished = False  # burst mode: no work left; the arbiter drains

    # -- the loop's calls ---------------------------------------------------------------
    def open(self) -> None:
        """Connect to the database; raises ``DatabaseUnavailable`` if it cannot."""
        self.db.open()

    @property
    def database_up(self) -> bool:
        """Whether the database connections are usable now."""
        return self.db.up

    def tick(self, now: float, pool: Pool) -> None:
        """Do everything that is due; never blocks longer than one statement."""
        db = self.db
        self.reporter.record(pool.take_outcomes(), now)
        self.planner.jobs_ended(self.reporter.take_ended())
        if not db.up and db.maybe_reconnect():
            self._reconnected(now, pool)
        self.planner.wake(db.take_notified())
        if db.take_scheduled():
            self._poll_soon(now)
        self._paused(db.take_paused(), now, pool)
        self._cancelled(db.take_cancelled(), pool)
        self.dispatch(pool)
        if db.up:
            self._timers(now, pool)
        in_flight = self.claim_in_flight
        if self.claimer.accepting and db.up:
            self.claimer.claim(now, pool.size(), eager=self.outbox.due(now, in_flight))
            self.dispatch(pool)
        if db.up:  # after the claim is sent: these round trips overlap its execution
            self._housekeeping(now, pool)
        if db.up and self.outbox.due(now, self.claim_in_flight, pool.busy_count() == 0):
            self.outbox.flush(db, now)
        if self.outbox.retries_written:
            self.outbox.retries_written = 0
            self._poll_soon(now)  # learn when the retries are due, and wake then
        if self.config.burst and self.claimer.accepting:
            self._check_burst(now, pool)

    def next_deadline(self, now: float, pool: Pool) -> float:
        """When ``tick`` must run again at the latest (the loop may wake earlier)."""
        if not self.db.up:
            retry = self.db.next_retry()
            return retry if retry is not None else now + 1.0
        due = [self.next_poll, self.next_renew, self.maintenance.next_round,
               self.planner.limits.next_refresh]
        if self.next_promote is not None:
            due.append(self.next_promote)
        fire_at = self.schedules.next_due() if self.schedules is not None else None
        if fire_at is not None:
            due.append(fire_at)
        flush_at = self.outbox.next_flush_at(self.claim_in_flight, pool.busy_count() == 0)
        if flush_at is not None:
            due.append(flush_at)
        token_at = self.planner.next_token_at(now)
        if token_at is not None:
            due.append(token_at)
        if self.config.burst and self.claimer.accepting and self._settled(pool):
            due.append(self.next_burst_check)
        return min(due)

    @property
    def claim_in_flight(self) -> bool:
        """A claim was sent and has not been answered."""
        return self.claimer.in_flight is not None

    def dispatch(self, pool: Pool) -> None:
        """Queue waiting jobs in children's pipes; a child's START records each start.
        Idle children go to the queue furthest below its share first; then each busy
        child's pipe is topped up with jobs of the queue it runs, while that queue is
        within its share (so a queue's children drain and move on when it is not)."""
        ledger = self.ledger
        planner = self.planner
        if len(self.queues) == 1:  # the common case needs no share arithmetic
            queue = self.queues[0]
            depth = planner.depth.pipeline(queue, planner.policies[queue].prefetch)
            # A global max_running (supervisor queues limit) caps the children that run
            # the queue here; past it, only the pipes of children already running it are
            # topped up (a queued job runs after the one ahead of it, never beside it).
            cap = planner.start_cap(queue)
            room = None if cap is None else cap - pool.occupied()[queue]
            while (job := ledger.pop_waiting(queue)) is not None:
                idle = pool.idle_count()
                if not pool.dispatch(job, depth, own_queue=room is not None and room <= 0):
                    ledger.unpop_waiting(job)
                    break
                ledger.sent(job)
                if room is not None and pool.idle_count() < idle:
                    room -= 1
            pool.push()
            return
        size = pool.size()
        while pool.idle_count() > 0:
            waiting = ledger.waiting_counts()
            # Under a global max_running the caps must count children given a job whose
            # START has not come back; without one, started jobs are the fairer measure.
            running = pool.occupied() if planner.limited() else ledger.running
            queue = planner.next_queue(size, waiting, running) if waiting else None
            if queue is None:
                break
            job = ledger.pop_waiting(queue)
            if not pool.dispatch(job, planner.depth.pipeline(queue,
                                                             planner.policies[queue].prefetch)):
                ledger.unpop_waiting(job)
                break
            ledger.sent(job)
        waiting = ledger.waiting_counts()
        if waiting:
            targets = planner.targets(size, waiting)
            for queue in waiting:
                depth = planner.depth.pipeline(queue, planner.policies[queue].prefetch)
                if depth < 2 or ledger.running[queue] > targets.get(queue, 0):
                    continue
                while (job := ledger.pop_waiting(queue)) is not None:
                    if not pool.dispatch(job, depth, own_queue=True):
                        ledger.unpop_waiting(job)
                        break
                    ledger.sent(job)
        pool.push()

    # -- stopping -----------------------------------------------------------------------
    def drain(self, now: float) -> int:
        """Claim nothing more; claimed jobs that have not started go back now (their
        attempt not counted). Returns how many went back."""
        self.claimer.accepting = False
        self.reporter.releasing = True
        waiting = self.ledger.take_waiting()
        self.outbox.released(waiting, now)
        self.flush(now)
        return len(waiting)

    def collect(self, pool: Pool, now: float) -> None:
        """Book what the pool reported since the last tick (used while stopping)."""
        self.reporter.record(pool.take_outcomes(), now)

    def flush(self, now: float, *, last_chance: bool = False) -> None:
        """Write every pending outcome now."""
        self.outbox.flush(self.db, now, last_chance=last_chance)

    def close(self, pool: Pool, now: float) -> None:
        """Last writes before exit, leave the supervisors' registry, disconnect."""
        self.collect(pool, now)
        self.flush(now, last_chance=True)
        self.db.call(lambda store: self.planner.limits.close(store), None,
                     "giving back global limit slices")
        self.db.call(lambda store: store.leave(), None, "leaving the registry")
        self.db.close()

    def queue_counts(self) -> dict | None:
        """Per-queue counts of live jobs (None while the database is away)."""
        return self.db.call(lambda s: s.queue_counts(self.queues), None, "counting jobs")

    # -- what is due --------------------------------------------------------------------
    def _timers(self, now: float, pool: Pool) -> None:
        if now >= self.next_poll:
            # A fixed interval with jitter: no exponential backoff, it costs throughput.
            self.next_poll = now + self.config.poll_interval * random.uniform(0.8, 1.2)
            self._poll(now)
        elif self.next_promote is not None and now >= self.next_promote:
            self._poll(now)
        if now >= self.next_renew:
            self.next_renew = now + self.config.lease_ttl / 3
            self._renew(pool)
        if self.planner.limits.due(now):
            ledger = self.ledger
            # A slice must cover every job handed to a child, started or not: counting
            # only confirmed starts gave slots back that a START on its way would use.
            self.db.call(lambda s: self.planner.refresh_limits(
                s, now, pool.size(), pool.occupied(), ledger.waiting_counts()),
                None, "renewing global limits")

    def _housekeeping(self, now: float, pool: Pool) -> None:
        """What the claim does not wait for: the maintenance round (beat, rescue,
        pruning) and firing periodic jobs."""
        if self.maintenance.due(now):
            info = {"kinds": self.kinds}
            rescued = self.db.call(lambda s: self.maintenance.run_round(
                s, children=pool.size(), busy=pool.busy_count(), info=info,
                may_lead=now >= self.rescue_hold_until), 0, "maintenance")
            if rescued:
                self.metrics.rescued(rescued)
        schedules = self.schedules
        if schedules is not None and now >= (schedules.next_due() or float("inf")):
            self.db.call(lambda s: schedules.fire_due(s.conn), 0, "firing schedules")

    def _poll(self, now: float) -> None:
        """Promote due scheduled/retryable jobs, ask which queues hold work and when the
        next job for later is due (the loop wakes then, not at its next poll)."""
        db, queues, kinds = self.db, self.queues, self.kinds
        self.last_poll = now
        db.call(lambda s: s.promote_due(), 0, "promoting due jobs")
        with_work = db.call(lambda s: s.queues_with_work(queues, kinds), None,
                            "polling for work")
        if with_work is not None:
            self.planner.observed(with_work | db.take_notified())
        due_in = db.call(lambda s: s.seconds_until_due(queues, kinds), None, "polling for work")
        # Due already (it came due while this poll ran): promote it a moment from now.
        self.next_promote = None if due_in is None else now + max(due_in, PROMOTE_AGAIN)
        if self.ledger.waiting_counts():
            # Catches a pause whose NOTIFY was missed (say, while reconnecting).
            self._paused(db.call(lambda s: s.paused_queues(queues), set(), "polling"), now)

    def _poll_soon(self, now: float) -> None:
        self.next_poll = min(self.next_poll, max(now, self.last_poll + MIN_POLL_GAP))

    def _paused(self, queues: set[str], now: float, pool: Pool | None = None) -> None:
        """Paused queues start nothing more here: what they hold unstarted goes back,
        from the ledger now and from children's pipes as each child gives it up."""
        for queue in queues & set(self.queues):
            self.planner.demand.discard(queue)
            waiting = self.ledger.take_waiting(queue)
            # Those queued in children come back as their children give them up.
            asked = pool.take_back(queue) if pool is not None else 0
            if waiting or asked:
                log.info("queue %s paused: %d claimed jobs that had not started go back",
                         queue, len(waiting) + asked)
            if waiting:
                self.outbox.released(waiting, now)

    def _renew(self, pool: Pool) -> None:
        held = pool.running() + self.ledger.waiting_jobs()
        if not held:
            return
        fenced = self.db.call(lambda s: s.renew([(j.id, j.attempt) for j in held]), None,
                              "renewing leases")
        if fenced is None:
            return
        self.metrics.renewed(len(held) - len(fenced))
        if fenced:
            self.metrics.fenced("renew", len(fenced))
        for job_id in fenced:
            # The lease moved on (rescued elsewhere, or cancelled by an operator): stop.
            log.warning("job %d: lease lost (rescued or cancelled); abandoning it", job_id)
            pool.cancel(job_id)
        self.ledger.drop_waiting(set(fenced))

    def _cancelled(self, job_ids: set[int], pool: Pool) -> None:
        for job_id in job_ids:
            if pool.cancel(job_id):
                log.warning("job %d cancelled by an operator: its child is being killed", job_id)
        self.ledger.drop_waiting(job_ids)

    def _reconnected(self, now: float, pool: Pool) -> None:
        """Write what we hold, renew our leases, give back what a lost claim answer left
        under our name; rescue nothing until every live supervisor could renew."""
        self.rescue_hold_until = now + self.config.lease_ttl
        self.flush(now)
        self._renew(pool)
        held = ([j.id for j in pool.running()] + [j.id for j in self.ledger.waiting_jobs()]
                + self.outbox.held_ids())
        returned = self.db.call(lambda s: s.reconcile(held), [], "reconciling claims")
        if returned:
            log.warning("%d jobs claimed just before the connection was lost never reached "
                        "this supervisor; they are available again, attempt not counted",
                        len(returned))
            self.metrics.reconciled(len(returned))
        self.next_poll = now  # look at the queues again right away

    def _settled(self, pool: Pool) -> bool:
        """Nothing runs, nothing is held, written or claimed: only the database can
        say whether work is left."""
        return not (pool.busy_count() or not self.ledger.idle() or self.outbox.count()
                    or not self.db.up or self.claim_in_flight)

    def _check_burst(self, now: float, pool: Pool) -> None:
        if now < self.next_burst_check or not self._settled(pool):
            return
        # Only the database checks wait between tries: once the last job's outcome is
        # written the check runs in the same turn.
        self.next_burst_check = now + BURST_CHECK_INTERVAL
        db = self.db
        promoted = db.call(lambda s: s.promote_due(), 0, "promoting due jobs")
        horizon = self.config.burst_horizon
        more = promoted or db.call(lambda s: s.has_due_work(self.queues, self.kinds, horizon),
                                   True, "checking for work")
        if more:
            self._poll(now)
            return
        left, next_at = db.call(lambda s: s.left_for_later(self.queues, self.kinds),
                                (0, None), "checking for work")
        later = (f"; {left} jobs are due later than the {horizon:.0f} s horizon, the next at "
                 f"{next_at:%Y-%m-%d %H:%M:%S %Z}" if left else "")
        unhandled = db.call(lambda s: s.unhandled_waiting(self.queues, self.kinds), {},
                            "checking for work")
        if unhandled:
            shown = ", ".join(f"{kind} ({n})" for kind, n in list(unhandled.items())[:10])
            more_kinds = f" and {len(unhandled) - 10} more kinds" if len(unhandled) > 10 else ""
            log.warning("burst: %d jobs in %s wait for kinds no loaded handler runs: %s%s; "
                        "they stay queued for a supervisor whose --app defines them",
                        sum(unhandled.values()), ",".join(self.queues), shown, more_kinds)
        log.info("burst: no more work in %s%s; exiting", ",".join(self.queues), later)
        self.burst_finished = True
