"""The job engine: everything between the queue table and the pool.

The arbiter turns the loop and calls ``tick(now, pool)`` once per turn, and sleeps until
``next_deadline()``. Each tick the engine books what the children reported, hands waiting
jobs to idle children, claims what can start now (carrying finished jobs' completions),
writes the other outcomes when due, renews leases, polls, promotes due jobs, runs
maintenance rounds and notices the end of a burst. It never signals or forks anything:
process supervision is the arbiter's and the pool's.

The engine is the order of these steps; each is a part of its own: lease keeping,
outages and self-fencing (``fencing.LeaseKeeper``), polling and pauses
(``polling.Poller``), housekeeping: maintenance, breaker, schedules, kind memory, the
horizon look, the end of a burst (``housekeeping.Housekeeping``), the dispatch of
claimed jobs to children (``dispatcher.Dispatcher``), a drain (``draining.Drain``) and
the table reads of the arbiter's reports (``reads.RunReads``). While the database is away
nothing that needs it is scheduled (the loop sleeps until the next reconnection attempt,
it does not spin), and nothing new starts.
"""

from __future__ import annotations

import logging
import selectors
import time
from typing import TYPE_CHECKING

from supervisor.admission import Admission, make_budget
from supervisor.breaker import Breaker, BreakerSettings
from supervisor.db import (
    ArchivePlan,
    Compaction,
    Database,
    HistoryWriter,
    RunFailures,
    Waiting,
)
from supervisor.engine.claims import Claimer
from supervisor.engine.dispatcher import Dispatcher
from supervisor.engine.draining import Drain
from supervisor.engine.explain import Explainer
from supervisor.engine.fencing import LeaseKeeper
from supervisor.engine.housekeeping import Housekeeping
from supervisor.engine.ledger import Ledger
from supervisor.engine.outbox import Outbox
from supervisor.engine.planner import Scheduler
from supervisor.engine.policy import served_kinds, store_settings
from supervisor.engine.polling import Poller
from supervisor.engine.reads import RunReads
from supervisor.engine.reporting import OutcomeReporter
from supervisor.observe import JobTracer, SupervisorMetrics
from supervisor.pool import RunTimes

if TYPE_CHECKING:  # config imports the allotment, and the pool comes in each tick
    from supervisor.config import RunConfig
    from supervisor.pool import Pool
    from supervisor.schedules import Schedules

log = logging.getLogger("supervisor.engine")


class Engine:
    """Claims, dispatches, writes and keeps the books for one supervisor."""

    def __init__(self, config: RunConfig, dsn: str, owner: str, queues: list[str],
                 kinds: list[str], metrics: SupervisorMetrics,
                 selector: selectors.BaseSelector, *, clock=time.monotonic,
                 database: Database | None = None, schedules: Schedules | None = None,
                 tracer: JobTracer | None = None, history: HistoryWriter | None = None,
                 run_times: RunTimes | None = None) -> None:
        now = clock()
        self.config, self.owner, self.queues, self.metrics, self.clock = (
            config, owner, queues, metrics, clock)
        budget = make_budget(config.children, config.memory_budget, resources=config.resources)
        # A kind whose handler declares more than this supervisor's whole budget (CPUs,
        # memory, counted resources) is not served here, said once.
        self.kinds = kinds = served_kinds(kinds, budget)
        # The handlers' settings the store applies (a database given comes with its own).
        settings = store_settings(kinds, config.max_attempts, config.poison_after)
        self.db = db = database or Database(dsn, owner, config.lease_ttl, selector,
                                            clock=clock,
                                            statement_timeout=config.statement_timeout,
                                            listen=config.listen,
                                            deadline=config.database_deadline,
                                            store_settings=settings)
        # How long jobs run here: the pool feeds it (the arbiter hands both the same),
        # the depth, the claim's carry and a drain's notices read it.
        self.run_times = run_times if run_times is not None else RunTimes(config.tuning)
        self.planner = Scheduler(config, queues, now, clock=clock, metrics=metrics,
                                 owner=owner, run_times=self.run_times)
        self.admission = Admission(budget, config.admission_patience)
        self.ledger = Ledger(self.admission)
        self.outbox = Outbox(metrics, config.flush_interval, tracer, config.tuning)
        self.claimer = Claimer(db, self.planner, self.ledger, self.outbox, metrics, kinds,
                               config.default_timeout, clock, tracer, self.admission,
                               self.run_times)
        self.reporter = OutcomeReporter(self.ledger, self.outbox, metrics)
        self.explainer = Explainer(self.planner, self.run_times)  # status --explain
        self.reporter.crash_rule = settings.crash_rule
        self.leases = LeaseKeeper(config, db, self.planner, self.ledger, self.outbox,
                                  self.reporter, self.claimer, metrics, queues, now, clock,
                                  self.flush)
        breaker = Breaker(BreakerSettings(config.breaker_failures, config.breaker_window,
                                          config.breaker_cooldown))
        self.poller = Poller(config, db, queues, kinds, self.claimer, self.planner,
                             self.ledger, self.outbox, breaker, now, self.leases.refresh_limits)
        # The leader's per-minute history, on a connection of its own (opened when first
        # needed), so its statements never hold this loop. An engine given its database
        # (tests over fakes) writes none unless given a writer too.
        if history is None and database is None:
            history = HistoryWriter(dsn, f"supervisor {owner} history", selector,
                                    statement_timeout=config.statement_timeout,
                                    deadline=config.database_deadline, clock=clock,
                                    archive=ArchivePlan(config.retention,
                                                        config.discarded_retention),
                                    compaction=Compaction())
        self.housekeeping = Housekeeping(
            config, db, queues, kinds, poller=self.poller, breaker=breaker,
            reporter=self.reporter, claimer=self.claimer, ledger=self.ledger,
            outbox=self.outbox, admission=self.admission,
            explainer=self.explainer, metrics=metrics, schedules=schedules, history=history,
            now=now, clock=clock)
        self.dispatcher = Dispatcher(queues, self.ledger, self.planner, self.admission,
                                     self.outbox, clock)
        self.reads = RunReads(db, owner, queues)  # the arbiter's reports
        self.draining = Drain(db, self.claimer, self.reporter, self.ledger, self.outbox,
                              self.run_times, config.tuning.drain_min_samples, clock,
                              self.flush)

    # -- the loop's calls ---------------------------------------------------------------
    def open(self, check_schema: bool = False) -> None:
        """Connect to the database; raises ``DatabaseUnavailable`` if it cannot be
        reached (one that drops the connections as they open begins an outage), and
        with ``check_schema`` ``SchemaMissing`` unless the schema is this code's. Says
        which memory budget applies and where it comes from (issue 51)."""
        self.db.start(check_schema=check_schema)
        log.info("memory: %s", self.admission.memory_summary())

    @property
    def database_up(self) -> bool:
        """Whether the database connections are usable now."""
        return self.db.up

    @property
    def fenced(self) -> bool:
        """Leases went unrenewed too long: nothing starts until a renewal succeeds."""
        return self.leases.fenced

    @property
    def burst_finished(self) -> bool:
        """Burst mode found no work left: the arbiter drains."""
        return self.housekeeping.burst_finished

    def tick(self, now: float, pool: Pool) -> None:
        """Do everything that is due; never blocks longer than one statement."""
        db, leases, poller = self.db, self.leases, self.poller
        self.collect(pool, now)
        self.planner.jobs_ended(self.reporter.take_ended())
        db.expire(now)  # a claim a hung server never answers
        if self.housekeeping.history is not None:
            self.housekeeping.history.tick(now)  # its connect, and its statement's deadline
        if not db.up and db.maybe_reconnect():
            leases.reconnected(now, pool)
            poller.right_away(now)  # look at the queues again right away
            self.planner.limits.changed(now)  # and at the limits: no notice was heard
        self.planner.wake(db.take_notified(), db.take_named_batches(),
                          lambda queue: self._batches_held(pool, queue))
        self.claimer.cursors.observed(db.take_notified_keys(), db.take_notified_batches())
        if db.take_scheduled():
            poller.soon(now)
        if db.settings_changed:
            changed = db.take_settings_changed()
            if "kind_pauses" in changed:
                poller.kind_pauses_changed()
            if "queue_limits" in changed:
                self.planner.limits.changed(now)
        poller.notified_pauses(db.take_paused(), now, pool)
        leases.cancelled(db.take_cancelled(), pool)
        if db.up and not leases.fenced:
            self.dispatch(pool)
            self.dispatcher.all_stuck(now, pool)
        elif not db.up:
            leases.hold_back(pool)
        if db.up:
            poller.tick(now, pool)
            leases.tick(now, pool)
        leases.check(now, pool)
        if self.claimer.accepting and db.up and not leases.fenced:
            self._claim(now, pool)
        # After the claim is sent, so these round trips overlap its execution; but not
        # before the first claim's answer: the idle children of a start wait for it, and
        # the first maintenance round (30 ms on a loaded machine) held it unread.
        if db.up and (self.claimer.answers or not self.claim_in_flight):
            self.housekeeping.run(now, pool, may_lead=leases.may_lead(now))
        # Completions alone ride a claim of no job rather than hold the loop.
        if (db.up and self.outbox.due(now, self.claim_in_flight, pool.busy_count() == 0,
                                      self._claim_coming_for_outbox(pool))
                and not self.claimer.carry(now, self.queues[0])):
            self.flush(now)
        self._hand_back_news(now, pool)
        self.housekeeping.check_burst(now, pool)
        self.draining.tick(now, pool)

    def _claim(self, now: float, pool: Pool) -> None:
        """Claim for the children that can take jobs, then dispatch what came."""
        claimer = self.claimer
        # What the claim is sized by is only worked out when one can be sent: most
        # turns come while one is out (issue 43).
        if claimer.can_send:
            # A child stuck on a long job takes nothing more until it ends: claiming for
            # it would only have the jobs wait here, leased, instead of in the table.
            stuck = pool.overrunning_heads()
            outbox = self.outbox
            eager = (outbox.due(now, self.claim_in_flight,
                                claim_coming=self._claim_coming_for_outbox(pool))
                     or (bool(outbox.pending.completions)
                         and claimer.carries_alone(pool.busy_count(), outbox.flush_interval)))
            claimer.claim(now, pool.size() - sum(stuck.values()), eager=eager, set_aside=stuck,
                          batches_held=lambda queue: self._batches_held(pool, queue))
        self.dispatch(pool)
        if pool.idle_count() and not self.ledger.has_waiting():
            pool.rebalance(self.dispatcher.nothing_to_claim)

    def _batches_held(self, pool: Pool, queue: str) -> set[int]:
        """The batches of ``queue`` this supervisor holds jobs of: in children, or
        claimed and waiting for one."""
        in_children = {batch for batch in pool.batch_counts(queue) if batch is not None}
        return in_children | self.ledger.batches_waiting(queue)

    def _hand_back_news(self, now: float, pool: Pool) -> None:
        """Tell the pool which checkpoints were written and which jobs were discarded;
        retries written make the next poll come soon (to learn when they are due)."""
        if self.outbox.acks:
            for job_id, written in self.outbox.take_acks():
                pool.checkpoint_written(job_id, written)
        if self.reporter.discarded:
            for told in self.reporter.take_discarded():
                pool.tell_discarded(told)
        if self.outbox.retries_written:
            self.outbox.retries_written = 0
            self.poller.soon(now)

    def run_failures(self, window: float) -> RunFailures | None:
        """What this supervisor's recently ended jobs failed for (``RunReads``)."""
        return self.reads.run_failures(window)

    def cancelled_dependents(self, window: float) -> int | None:
        """Dependents this supervisor's recent discards cancelled (``RunReads``)."""
        return self.reads.cancelled_dependents(window)

    def waiting(self) -> Waiting | None:
        """What waits in the served queues, for a run_at or dependencies (``RunReads``)."""
        return self.reads.waiting()

    def next_deadline(self, now: float, pool: Pool) -> float:
        """When ``tick`` must run again at the latest (the loop may wake earlier)."""
        db = self.db
        fence_at = self.leases.fence_at(pool)
        if not db.up:
            retry = db.next_retry()
            due = retry if retry is not None else now + 1.0
            return due if fence_at is None else min(due, fence_at)
        due = min(self.leases.next_renew, self.planner.limits.wake_at(),
                  *self.poller.deadlines(), *self.housekeeping.deadlines())
        # Asked once a turn: no list of every deadline, the earliest kept as they come.
        for at in (fence_at, db.next_expiry(), self.planner.next_token_at(now),
                   self.outbox.next_flush_at(self.claim_in_flight, pool.busy_count() == 0,
                                             self._claim_coming_for_outbox(pool)),
                   self.housekeeping.burst_check_at(pool)):
            if at is not None and at < due:
                due = at
        return due

    def _claim_coming(self, pool: Pool) -> bool:
        """A claim will be sent as the running jobs end (``Claimer.coming``)."""
        return not self.fenced and self.claimer.coming(pool.busy_count())

    def _claim_coming_for_outbox(self, pool: Pool) -> bool:
        """``_claim_coming`` as the outbox's timing reads it: only pending outcomes
        wait for a claim, so with none pending it is not worked out (False)."""
        return self.outbox.since is not None and self._claim_coming(pool)

    @property
    def claim_in_flight(self) -> bool:
        """A claim was sent and has not been answered."""
        return self.claimer.in_flight is not None

    def urgent_fds(self) -> list[int]:
        """Sockets whose answer the loop hears at once, even while it lets its children's
        answers gather (``Arbiter._settle``): the claim's, when one is out. Its jobs
        feed the pipes, and the next claim can only go once it is booked."""
        runner = self.db.claims
        return [runner.fd] if runner is not None and runner.busy else []

    def claim_margin(self) -> float:
        """Seconds of queued work the children must keep beyond a wait of the loop's
        for the claim that wait may delay to come in time: ``claim_round_trips`` of
        the claim's measured round trip (``PrefetchDepth.latency``)."""
        return self.planner.tuning.claim_round_trips * self.planner.depth.latency

    def dispatch(self, pool: Pool) -> None:
        """Queue waiting jobs in children's pipes (``engine.dispatcher``)."""
        # With no job waiting there is nothing to hand out, and nothing left to push
        # (each dispatch pushes what it queued): most turns (issue 43).
        if self.ledger.has_waiting():
            self.dispatcher.dispatch(pool)

    # -- stopping -----------------------------------------------------------------------
    def watch_signals(self, wakeup_fd: int) -> None:
        """Let a stop signal end any wait for the database (``Drain.watch_signals``)."""
        self.draining.watch_signals(wakeup_fd)

    def drain(self, now: float) -> int:
        """Claim nothing more; claimed jobs that have not started go back now (their
        attempt not counted). Returns how many went back."""
        return self.draining.begin(now)

    def notify_drain(self, pool: Pool, grace: float) -> int:
        """At a drain's start: tell the running jobs that cannot finish within the
        grace to checkpoint and stop (``engine.notices``); each tick after, the jobs
        that started late or overran their estimate. Returns how many were told now."""
        return self.draining.notify(pool, grace)

    def collect(self, pool: Pool, now: float) -> None:
        """Book what the pool reported since the last tick (used while stopping)."""
        self.reporter.record(pool.take_outcomes(), now)
        if self.reporter.crashes:
            self.housekeeping.count_crashes()

    def flush(self, now: float, *, last_chance: bool = False) -> None:
        """Write every pending outcome now, then say what the writes of failed attempts
        decided (one log line each, after the row's poison verdict)."""
        self.outbox.flush(self.db, now, last_chance=last_chance)
        for written in self.outbox.take_failures_written():
            self.reporter.settle_failures(written)

    def close(self, pool: Pool, now: float) -> None:
        """Last writes before exit, leave the supervisors' registry, disconnect."""
        self.collect(pool, now)
        self.db.reopen_for_exit()
        self.flush(now, last_chance=True)
        self.leases.give_back_lost_claims(pool)
        self.housekeeping.save_kind_memory()
        self.db.call(lambda store: self.planner.limits.close(store), None,
                     "giving back global limit slices")
        self.db.call(lambda store: store.leave(), None, "leaving the registry")
        if self.housekeeping.history is not None:
            self.housekeeping.history.close()  # a round under way is dropped, not waited for
        self.db.close()

    def queue_counts(self) -> dict | None:
        """Per-queue counts of live jobs (``RunReads``; None while the database is away)."""
        return self.reads.queue_counts()
