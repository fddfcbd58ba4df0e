"""The job engine: everything between the queue table and the pool.

The arbiter turns the loop and calls ``tick(now, pool)`` once per turn, and sleeps until
``next_deadline()``. Each tick the engine books what the children reported, hands waiting
jobs to idle children, claims what can start now (carrying finished jobs' completions),
writes the other outcomes when due, renews leases, polls, promotes due jobs, runs
maintenance rounds and notices the end of a burst. It never signals or forks anything:
process supervision is the arbiter's and the pool's.

Database outages are ridden out here. While the database is away nothing that needs it
is scheduled (the loop sleeps until the next reconnection attempt, it does not spin),
and nothing new starts: what children hold queued is asked back (``_hold_back``).
After a reconnect the engine first writes what it holds, renews its own leases and gives
back rows that a lost claim answer left running under its name; it takes no part in
rescuing expired leases for one lease period, so every live supervisor has renewed its
own jobs before anyone judges them lost. A database that hangs is an outage like any
other (the client-side deadline of ``supervisor.db``), so the same rules hold after a hang.

Self-fencing: a lease this supervisor cannot renew will be rescued by another once it
expires. So when its leases (or its slice of a global ``max_running``) have gone
unrenewed for ``lease_ttl - margin`` (``shared.defaults.fence_margin``), it interrupts
its running jobs, gives back what it holds unstarted and starts nothing, before anyone
may take them over. The interrupted attempts go back uncharged, as at the end of a
drain: the outbox writes them when the database answers again (if another supervisor's
rescue comes first, the rescue decides, as for a supervisor that died). Once a renewal
succeeds again, it resumes.
"""

from __future__ import annotations

import logging
import random
import selectors
import signal
import time
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from shared import defaults
from supervisor.admission import Admission, make_budget
from supervisor.breaker import Breaker, BreakerSettings
from supervisor.db import (
    Database,
    HistoryWriter,
    Interrupt,
    RunFailures,
    Waiting,
    cancelled_dependents,
    kind_run_p95,
    run_failures,
    waiting,
)
from supervisor.engine.admitted import dispatch_admitted
from supervisor.engine.claims import Claimer
from supervisor.engine.explain import Explainer
from supervisor.engine.horizon import HorizonWatch
from supervisor.engine.ledger import Ledger
from supervisor.engine.maintenance import Maintenance, MaintenanceSettings
from supervisor.engine.notices import notify_drain, notify_fence, notify_pause
from supervisor.engine.outbox import Outbox
from supervisor.engine.planner import Scheduler
from supervisor.engine.policy import (
    crash_rule,
    handler_max_attempts,
    handler_poison_after,
    served_kinds,
)
from supervisor.engine.reporting import OutcomeReporter
from supervisor.observe import JobTracer, SupervisorMetrics
from supervisor.pool import RunTimes

if TYPE_CHECKING:  # config imports the allotment, and the pool comes in each tick
    from supervisor.config import RunConfig
    from supervisor.pool import Pool
    from supervisor.schedules import Schedules

log = logging.getLogger("supervisor.engine")

BURST_CHECK_INTERVAL = 0.1
PROMOTE_AGAIN = 0.005  # a job found due during a poll is promoted this soon after
MIN_POLL_GAP = 0.05  # polls asked for by events (NOTIFY, retries) come no closer than this
# Each kind's default memory reservation (its measured size: p95 of recent
# max_rss_bytes, the largest under 20 samples) is read this often while a memory budget
# applies: cached, never asked per claim; what each attempt here used raises it at once.
KIND_MEMORY_EVERY = 60.0


class Engine:
    """Claims, dispatches, writes and keeps the books for one supervisor."""

    def __init__(self, config: RunConfig, dsn: str, owner: str, queues: list[str],
                 kinds: list[str], metrics: SupervisorMetrics,
                 selector: selectors.BaseSelector, *, clock=time.monotonic,
                 database: Database | None = None, schedules: Schedules | None = None,
                 tracer: JobTracer | None = None, history: HistoryWriter | None = None,
                 run_times: RunTimes | None = None) -> None:
        now = clock()
        self.config = config
        self.owner = owner
        self.db = db = database or Database(dsn, owner, config.lease_ttl, selector,
                                            clock=clock,
                                            statement_timeout=config.statement_timeout,
                                            listen=config.listen,
                                            deadline=config.database_deadline)
        self.queues = queues
        budget = make_budget(config.children, config.memory_budget, resources=config.resources)
        # A kind whose handler declares more than this supervisor's whole budget (CPUs,
        # memory, counted resources) is not served here, said once.
        self.kinds = kinds = served_kinds(kinds, budget)
        self.metrics = metrics
        self.clock = clock
        # How long jobs run here: the pool feeds it (the arbiter hands both the same),
        # the depth, the claim's carry and a drain's notices read it.
        self.run_times = run_times if run_times is not None else RunTimes(config.tuning)
        self.planner = Scheduler(config, queues, now, clock=clock, metrics=metrics,
                                 owner=owner, run_times=self.run_times)
        self.admission = Admission(budget, config.admission_patience)
        self.next_kind_memory = now  # when each kind's default memory is read again
        self.breaker = Breaker(BreakerSettings(config.breaker_failures, config.breaker_window,
                                               config.breaker_cooldown))
        self.ledger = Ledger(self.admission)
        self.outbox = Outbox(metrics, config.flush_interval, tracer, config.tuning)
        self.claimer = Claimer(db, self.planner, self.ledger, self.outbox, metrics, kinds,
                               config.default_timeout, clock, tracer, self.admission)
        self.reporter = OutcomeReporter(self.ledger, self.outbox, metrics)
        self.explainer = Explainer(self.planner, self.run_times)  # status --explain
        # The leader's per-minute history, on a connection of its own (opened when first
        # needed), so its statements never hold this loop. An engine given its database
        # (tests over fakes) writes none unless given a writer too.
        if history is None and database is None:
            history = HistoryWriter(dsn, f"supervisor {owner} history", selector,
                                    statement_timeout=config.statement_timeout,
                                    deadline=config.database_deadline, clock=clock)
        self.history = history
        self.maintenance = Maintenance(
            queues, MaintenanceSettings(interval=config.maintenance_interval,
                                        retention=config.retention,
                                        discarded_retention=config.discarded_retention), clock,
            self.history)
        self.schedules = schedules
        self.horizon_watch = HorizonWatch(config.horizon_warn_after, metrics)
        self.next_horizon_look = now  # the first round looks: a hold may predate us
        db.store.max_attempts = handler_max_attempts(kinds)
        db.store.default_attempts = config.max_attempts
        db.store.poison_after = handler_poison_after(kinds)
        db.store.default_poison_after = config.poison_after
        db.store.crash_rule = self.reporter.crash_rule = crash_rule(kinds)
        self.next_poll = now
        self.last_poll = now - MIN_POLL_GAP
        self._claim_before_poll = True  # the start's claim: see _first_claim
        self.next_promote: float | None = None  # when the next scheduled/retrying job is due
        self.next_renew = now + config.lease_ttl / 3
        self.next_burst_check = now
        self.rescue_hold_until = 0.0
        self.burst_finished = False  # burst mode: no work left; the arbiter drains
        self.fence_margin = defaults.fence_margin(config.lease_ttl, config.database_deadline)
        self.planner.limits.margin = self.fence_margin
        # When the last renewal that covered every job held here was sent (a lease runs
        # from the moment its statement left, at the latest): self-fencing counts from it.
        self.leases_renewed_at = now
        self.fenced = False  # leases unrenewed too long: running nothing until renewed
        self._held_back = 0  # the outage whose queued jobs were taken back from children
        self.drain_ends: float | None = None  # draining: when the grace ends

    # -- the loop's calls ---------------------------------------------------------------
    def open(self, check_schema: bool = False) -> None:
        """Connect to the database; raises ``DatabaseUnavailable`` if it cannot, and
        with ``check_schema`` ``SchemaMissing`` unless the schema is this code's. Says
        which memory budget applies and where it comes from (issue 51)."""
        self.db.open(check_schema=check_schema)
        log.info("memory: %s", self.admission.memory_summary())

    @property
    def database_up(self) -> bool:
        """Whether the database connections are usable now."""
        return self.db.up

    def tick(self, now: float, pool: Pool) -> None:
        """Do everything that is due; never blocks longer than one statement."""
        db = self.db
        self.reporter.record(pool.take_outcomes(), now)
        if self.reporter.crashes:
            self._count_crashes()
        self.planner.jobs_ended(self.reporter.take_ended())
        db.expire(now)  # a claim a hung server never answers
        if self.history is not None:
            self.history.tick(now)  # its connect, and its statement's deadline
        if not db.up and db.maybe_reconnect():
            self._reconnected(now, pool)
        self.planner.wake(db.take_notified())
        self.claimer.cursors.observed(db.take_notified_keys())
        if db.take_scheduled():
            self._poll_soon(now)
        paused = db.take_paused()
        if paused:
            # Read the rows the NOTIFY named: whether their running jobs stop too (the
            # database away: paused all the same, a later poll reads the flag).
            pauses = db.call(lambda s: s.queue_pauses(sorted(paused)), None,
                             "reading paused queues")
            self._paused(dict.fromkeys(paused, False) if pauses is None else pauses, now, pool)
        self._cancelled(db.take_cancelled(), pool)
        if db.up and not self.fenced:
            self.dispatch(pool)
            self._all_stuck(now, pool)
        elif not db.up and self._held_back != db.outages:
            self._hold_back(pool)
        if db.up:
            self._timers(now, pool)
        self._check_fence(now, pool)
        in_flight = self.claim_in_flight
        if self.claimer.accepting and db.up and not self.fenced:
            # A child stuck on a long job takes nothing more until it ends: claiming for
            # it would only have the jobs wait here, leased, instead of in the table.
            stuck = pool.overrunning_heads()
            self.claimer.claim(now, pool.size() - sum(stuck.values()),
                               eager=self.outbox.due(now, in_flight,
                                                     claim_coming=self._claim_coming(pool)),
                               set_aside=stuck)
            self.dispatch(pool)
            if pool.idle_count() and not self.ledger.waiting_counts():
                pool.rebalance(self._nothing_to_claim)
        # After the claim is sent, so these round trips overlap its execution; but not
        # before the first claim's answer: the idle children of a start wait for it, and
        # the first maintenance round (30 ms on a loaded machine) held it unread.
        if db.up and (self.claimer.answers or not self.claim_in_flight):
            self._housekeeping(now, pool)
        if db.up and self.outbox.due(now, self.claim_in_flight, pool.busy_count() == 0,
                                     self._claim_coming(pool)):
            self._write_outbox(now)
        if self.outbox.acks:
            for job_id, written in self.outbox.take_acks():
                pool.checkpoint_written(job_id, written)
        if self.reporter.discarded:
            for told in self.reporter.take_discarded():
                pool.tell_discarded(told)
        if self.outbox.retries_written:
            self.outbox.retries_written = 0
            self._poll_soon(now)  # learn when the retries are due, and wake then
        if self.config.burst and self.claimer.accepting:
            self._check_burst(now, pool)
        if self.drain_ends is not None and pool.busy_count():
            notify_drain(pool, self.run_times, max(0.0, self.drain_ends - now))

    def run_failures(self, window: float) -> RunFailures | None:
        """What this supervisor's jobs that ended in the last ``window`` seconds were
        discarded or cancelled for, from the table (None: it did not answer)."""
        return self.db.call(lambda s: run_failures(s.connection, self.owner, window), None,
                            "reading what the burst discarded")

    def cancelled_dependents(self, window: float) -> int | None:
        """Dependents that this supervisor's discards of the last ``window`` seconds
        cancelled (None: the table did not answer)."""
        return self.db.call(lambda s: cancelled_dependents(s.connection, self.owner, window),
                            None, "counting cancelled dependents")

    def waiting(self) -> Waiting | None:
        """What waits in the served queues, for a run_at or for dependencies (None: the
        table did not answer)."""
        return self.db.call(lambda s: waiting(s.connection, self.queues), None,
                            "reading what waits")

    def next_deadline(self, now: float, pool: Pool) -> float:
        """When ``tick`` must run again at the latest (the loop may wake earlier)."""
        # Once fenced, nothing is due for the fence until a renewal lifts it.
        fence_at = None if self.fenced else self._fence_at(pool)
        if not self.db.up:
            retry = self.db.next_retry()
            due_down = retry if retry is not None else now + 1.0
            return due_down if fence_at is None else min(due_down, fence_at)
        due = [self.next_poll, self.next_renew, self.maintenance.next_round,
               self.planner.limits.next_refresh]
        if fence_at is not None:
            due.append(fence_at)
        expiry = self.db.next_expiry()
        if expiry is not None:
            due.append(expiry)
        history_at = self.history.next_deadline() if self.history is not None else None
        if history_at is not None:
            due.append(history_at)
        if self.next_promote is not None:
            due.append(self.next_promote)
        fire_at = self.schedules.next_due() if self.schedules is not None else None
        if fire_at is not None:
            due.append(fire_at)
        flush_at = self.outbox.next_flush_at(self.claim_in_flight, pool.busy_count() == 0,
                                             self._claim_coming(pool))
        if flush_at is not None:
            due.append(flush_at)
        token_at = self.planner.next_token_at(now)
        if token_at is not None:
            due.append(token_at)
        if self.config.burst and self.claimer.accepting and self._settled(pool):
            due.append(self.next_burst_check)
        return min(due)

    def _nothing_to_claim(self, queue: str) -> bool:
        """``queue``'s last claim came back short, nothing has said since that it holds
        work (a NOTIFY, a poll), and no claim for it is out: no job of it is coming for
        an idle child, which may take one queued in another's pipe instead."""
        planner = self.planner
        return queue not in planner.demand and not planner.claiming(queue)

    def _claim_coming(self, pool: Pool) -> bool:
        """A claim will be sent as the running jobs end: some queue has work and a
        child is busy (each job that ends frees a place the claim fills), and its jobs
        are short. Completions wait for it a little (``tuning.claim_carry_wait``)
        rather than force a claim of one or two jobs, or a write of their own. Not for
        jobs of ``tuning.long_job`` or more: one claim per job is little beside them, and the
        claims it saved let a child that ends while the next claim is still out (slow
        on a loaded machine) wait for it: 100 ms runs were slower in 3 of 4 runs."""
        planner = self.planner
        if not (self.claimer.accepting and planner.demand and not self.fenced
                and pool.busy_count() > 0):
            return False
        average, long_job = self.run_times.queue_average, self.config.tuning.long_job
        return all((run_time := average(queue)) is not None and run_time < long_job
                   for queue in planner.demand)

    @property
    def claim_in_flight(self) -> bool:
        """A claim was sent and has not been answered."""
        return self.claimer.in_flight is not None

    def dispatch(self, pool: Pool) -> None:
        """Queue waiting jobs in children's pipes; a child's START records each start.
        Idle children go to the queue furthest below its share first; then each busy
        child's pipe is topped up with jobs of the queue it runs, while that queue is
        within its share (so a queue's children drain and move on when it is not)."""
        if self.admission.engaged:  # some job declares a reservation, or a default applies
            dispatch_admitted(self.ledger, self.planner, self.admission, pool,
                              len(self.queues) == 1, self.clock())
            return
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
        # Children per queue, counting those given a job whose START is not back yet:
        # counted by started jobs, two children made idle in one turn both went to the
        # first queue, and a second queue owed one waited behind its pipes (issue 44).
        held = pool.occupied()
        while pool.idle_count() > 0:
            waiting = ledger.waiting_counts()
            chosen = planner.next_queue(size, waiting, held) if waiting else None
            if chosen is None:
                break
            job = ledger.pop_waiting(chosen)
            if job is None:
                break
            idle = pool.idle_count()
            if not pool.dispatch(job, planner.depth.pipeline(chosen,
                                                             planner.policies[chosen].prefetch)):
                ledger.unpop_waiting(job)
                break
            ledger.sent(job)
            if pool.idle_count() < idle:
                held[chosen] += 1
        waiting = ledger.waiting_counts()
        if waiting:
            targets = planner.targets(size, waiting)
            for queue in waiting:
                depth = planner.depth.pipeline(queue, planner.policies[queue].prefetch)
                if depth < planner.tuning.min_top_up_pipe or held[queue] > targets.get(queue, 0):
                    continue
                while (job := ledger.pop_waiting(queue)) is not None:
                    if not pool.dispatch(job, depth, own_queue=True):
                        ledger.unpop_waiting(job)
                        break
                    ledger.sent(job)
            self._free_children_owed(pool, targets, held)
        pool.push()

    def _free_children_owed(self, pool: Pool, targets: Mapping[str, int],
                            held: Mapping[str, int]) -> None:
        """Queues with jobs waiting below their allotment while no child is idle: the
        children of queues above theirs give back what their pipes hold behind the job
        they run, so the next child to finish one goes to the queue owed it, not to
        the prefetched jobs of a queue over its share (issue 44)."""
        if pool.idle_count():
            return
        waiting = self.ledger.waiting_counts()
        caps = self.planner.caps(pool.size())
        owed = sum(max(0, min(targets.get(q, 0), caps.get(q, 0)) - held.get(q, 0))
                   for q, n in waiting.items() if n > 0)
        if owed <= 0:
            return
        over = {q for q, n in held.items() if n > targets.get(q, 0)}
        if over:
            pool.free_for(over, owed)

    def _all_stuck(self, now: float, pool: Pool) -> None:
        """Every child runs a job past its kind's p95 (issue 28): claimed jobs waiting
        here would wait, leased, for the first of those to end; they go back to the
        table (uncharged), where the next claim with a free child takes them."""
        size = pool.size()
        if size and pool.overrunning() >= size and self.ledger.waiting_counts():
            waiting = self.ledger.take_waiting()
            log.debug("every child runs a long job: %d claimed jobs go back", len(waiting))
            self.outbox.released(waiting, now)

    # -- stopping -----------------------------------------------------------------------
    def watch_signals(self, wakeup_fd: int) -> None:
        """Let the signal wakeup pipe end any wait for the database: a stop signal is then
        acted on whatever the database does (the connection is abandoned and the outage
        path takes over)."""
        self.db.interrupt = Interrupt(wakeup_fd)

    def drain(self, now: float) -> int:
        """Claim nothing more; claimed jobs that have not started go back now (their
        attempt not counted). Returns how many went back."""
        # Children ending is what a drain waits for: a wait for the database that a
        # child's exit finds longer than a moment is given up, so a hung database never
        # holds the drain past its grace (a healthy statement ends well within it).
        if self.db.interrupt is not None:
            self.db.interrupt.soft.add(signal.SIGCHLD)
        self.claimer.accepting = False
        self.reporter.releasing = True
        waiting = self.ledger.take_waiting()
        self.outbox.released(waiting, now)
        self.flush(now)
        return len(waiting)

    def notify_drain(self, pool: Pool, grace: float) -> int:
        """At a drain's start: tell the running jobs that cannot finish within the
        grace to checkpoint and stop (``engine.notices``); each tick after, the jobs
        that started late or overran their estimate. Returns how many were told now."""
        self.drain_ends = self.clock() + grace
        run_times = self.run_times
        unknown = run_times.unknown({job.kind for job, _ in pool.running_since()})
        if unknown:  # none completed here yet: the table's run times say (issue 47)
            fewest = self.config.tuning.drain_min_samples
            run_times.adopt(self.db.call(
                lambda s: kind_run_p95(s.connection, sorted(unknown), fewest), {},
                "reading run times"))
        return notify_drain(pool, run_times, grace)

    def collect(self, pool: Pool, now: float) -> None:
        """Book what the pool reported since the last tick (used while stopping)."""
        self.reporter.record(pool.take_outcomes(), now)
        if self.reporter.crashes:
            self._count_crashes()

    def flush(self, now: float, *, last_chance: bool = False) -> None:
        """Write every pending outcome now."""
        self._write_outbox(now, last_chance=last_chance)

    def _write_outbox(self, now: float, *, last_chance: bool = False) -> None:
        """Write what the outbox holds, then say what its writes of failed attempts
        decided (one log line each, after the row's poison verdict)."""
        self.outbox.flush(self.db, now, last_chance=last_chance)
        for written in self.outbox.take_failures_written():
            self.reporter.settle_failures(written)

    def close(self, pool: Pool, now: float) -> None:
        """Last writes before exit, leave the supervisors' registry, disconnect."""
        self.collect(pool, now)
        self.db.reopen_for_exit()
        self.flush(now, last_chance=True)
        self._save_kind_memory()
        self.db.call(lambda store: self.planner.limits.close(store), None,
                     "giving back global limit slices")
        self.db.call(lambda store: store.leave(), None, "leaving the registry")
        if self.history is not None:
            self.history.close()  # a round under way is dropped, not waited for
        self.db.close()

    def _save_kind_memory(self) -> None:
        """Keep the kind sizes that rose here (issue 51), so a supervisor that starts
        later admits its first jobs by them; kept for the next try if the database is
        away."""
        unsaved = self.admission.take_unsaved()
        if unsaved and self.db.call(lambda s: s.save_kind_memory(unsaved), None,
                                    "keeping each kind's memory use") is None:
            self.admission.not_saved(unsaved)

    def queue_counts(self) -> dict | None:
        """Per-queue counts of live jobs (None while the database is away)."""
        return self.db.call(lambda s: s.queue_counts(self.queues), None, "counting jobs")

    # -- what is due --------------------------------------------------------------------
    def _timers(self, now: float, pool: Pool) -> None:
        if self._claim_before_poll:
            self._claim_before_poll = False
            self._first_claim(now, pool)
        if now >= self.next_poll:
            # A fixed interval with jitter: no exponential backoff, it costs throughput.
            self.next_poll = now + self.config.poll_interval * random.uniform(0.8, 1.2)
            self._poll(now, pool)
        elif self.next_promote is not None and now >= self.next_promote:
            self._poll(now, pool)
        if now >= self.next_renew:
            self.next_renew = now + self.config.lease_ttl / 3
            self._renew(pool)
        if self.planner.limits.due(now):
            self._refresh_limits(now, pool)

    def _refresh_limits(self, now: float, pool: Pool) -> None:
        ledger = self.ledger
        # A slice must cover every job handed to a child, started or not: counting
        # only confirmed starts gave slots back that a START on its way would use.
        self.db.call(lambda s: self.planner.refresh_limits(
            s, now, pool.size(), pool.occupied(), ledger.waiting_counts()),
            None, "renewing global limits")

    def _first_claim(self, now: float, pool: Pool) -> None:
        """At start the first claim goes out before the first poll, which then runs while
        the database executes it: the idle children wait for the claim's answer, not for
        the poll's four statements too (issue 31: 2-5 ms of every start). What the claim
        must know is read first: paused kinds and the global limits. Every served queue
        is assumed to hold work; the claim of one that holds none comes back short, and
        the poll's answer sets the rest right."""
        self._read_kind_pauses(now)
        if self.planner.limits.due(now):
            self._refresh_limits(now, pool)
        if not self.db.up:
            return
        self.planner.wake(self.queues)
        self.claimer.claim(now, pool.size())

    def _housekeeping(self, now: float, pool: Pool) -> None:
        """What the claim does not wait for: the maintenance round (beat, rescue,
        pruning) and firing periodic jobs."""
        if self.reporter.take_native_news():
            # A child just went native: say so in the registry now, not a round later.
            self.maintenance.next_round = min(self.maintenance.next_round, now)
        if self.maintenance.due(now):
            # Each child's job, its age and memory ride on the heartbeat (once a round).
            info: dict[str, Any] = {"kinds": self.kinds,
                                    "children": [r.as_json() for r in pool.child_reports()],
                                    "explain": self.explainer.publish(pool.size())}
            native = pool.native_jobs(now)
            if native:
                info["native"] = [n.as_info() for n in native]
            admission = self.admission
            if admission.engaged or admission.budget.memory is not None:
                admission.prune({job.id for job in self.ledger.waiting_jobs()})
                info["admission"] = admission.report()
            rescued = self.db.call(lambda s: self.maintenance.run_round(
                s, children=pool.size(), busy=pool.busy_count(), info=info,
                may_lead=now >= self.rescue_hold_until), 0, "maintenance")
            if rescued:
                self.metrics.rescued(rescued)
        if self.breaker.pending:
            tripped = self.db.call(self.breaker.record, None,
                                   "recording crashes for the breaker")
            for kind, crashes in tripped or ():
                log.warning("kind %s paused on every supervisor for %.0f s: %d crashes "
                            "within %.0f s (breaker_failures %d)", kind,
                            self.config.breaker_cooldown, crashes, self.config.breaker_window,
                            self.config.breaker_failures)
                self.metrics.kind_tripped(kind)
            if tripped:
                self._read_kind_pauses(now)
        if self.admission.budget.memory is not None and now >= self.next_kind_memory:
            self.next_kind_memory = now + KIND_MEMORY_EVERY
            self._save_kind_memory()
            found = self.db.call(lambda s: s.kind_memory_p95(self.kinds), None,
                                 "reading each kind's memory use")
            if found is not None:
                self.admission.measured(found)
        if self.horizon_watch.warn_after and now >= self.next_horizon_look:
            self.next_horizon_look = now + defaults.HORIZON_LOOK_EVERY
            report = self.db.call(lambda s: s.horizon(), None,
                                  "reading who holds the MVCC horizon")
            if report is not None:
                self.horizon_watch.looked(report, now)
        schedules = self.schedules
        if schedules is not None and now >= (schedules.next_due() or float("inf")):
            self.db.call(lambda s: schedules.fire_due(s.connection), 0, "firing schedules")

    def _poll(self, now: float, pool: Pool) -> None:
        """Promote due scheduled/retryable jobs, ask which queues hold work and when the
        next job for later is due (the loop wakes then, not at its next poll)."""
        self._read_kind_pauses(now)
        db, queues, kinds = self.db, self.queues, self.claimer.kinds
        self.last_poll = now
        db.call(lambda s: s.promote_due(), 0, "promoting due jobs")
        starts = self.claimer.cursors.poll_starts(now, db.listen)
        with_work = db.call(lambda s: s.queues_with_work(queues, kinds, starts), None,
                            "polling for work")
        if with_work is not None:
            self.claimer.cursors.observed(with_work)
            self.planner.observed(set(with_work) | db.take_notified())
        due_in = db.call(lambda s: s.seconds_until_due(queues, kinds), None, "polling for work")
        # Due already (it came due while this poll ran): promote it a moment from now.
        self.next_promote = None if due_in is None else now + max(due_in, PROMOTE_AGAIN)
        if self.ledger.waiting_counts() or pool.busy_count():
            # Catches a pause whose NOTIFY was missed (say, while reconnecting), a job of
            # a queue paused with --stop-running that started all the same (its child
            # took it before the pause's SKIP came), and, with no LISTEN (behind a
            # pooler), is how --stop-running reaches this supervisor at all. One indexed
            # read a poll, only while jobs are held here.
            self._paused(db.call(lambda s: s.queue_pauses(queues), {}, "polling"), now, pool)

    def _count_crashes(self) -> None:
        """Hand the crashes the reporter saw to the breaker (written after the claim)."""
        for kind in self.reporter.crashes:
            self.breaker.crashed(kind)
        self.reporter.crashes.clear()

    def _read_kind_pauses(self, now: float) -> None:
        """Learn which kinds are paused (breaker or by hand): claims leave them out, and
        claimed jobs of theirs not started yet go back."""
        changed = self.db.call(self.breaker.refresh, None, "reading paused kinds")
        if not changed or not (changed[0] or changed[1]):
            return
        paused, resumed = changed
        for kind in sorted(paused):
            log.warning("kind %s is paused: %s; starting none of it", kind,
                        self.breaker.paused[kind])
        for kind in sorted(resumed):
            log.info("kind %s resumed", kind)
        self.claimer.kinds = self.breaker.active(self.kinds)
        self.claimer.cursors.forget()  # a resumed kind's jobs may wait behind them
        if paused:
            held = [job for job in self.ledger.waiting_jobs() if job.kind in paused]
            if held:
                self.ledger.drop_waiting({job.id for job in held})
                self.outbox.released(held, now)

    def _poll_soon(self, now: float) -> None:
        self.next_poll = min(self.next_poll, max(now, self.last_poll + MIN_POLL_GAP))

    def _paused(self, pauses: dict[str, bool], now: float, pool: Pool) -> None:
        """Paused queues start nothing more here: what they hold unstarted goes back,
        from the ledger now and from children's pipes as each child gives it up. Those
        paused with ``--stop-running`` (``pauses[name]`` True) also stop their running
        jobs: a stop notice, the kill after ``kill_grace`` (``engine.notices``)."""
        queues = set(pauses)
        stopping = {queue for queue, stop in pauses.items() if stop} & set(self.queues)
        if stopping:
            notify_pause(pool, stopping, self.config.kill_grace)
        for queue in queues & set(self.queues):
            self.planner.demand.discard(queue)
            waiting = self.ledger.take_waiting(queue)
            # Those queued in children come back as their children give them up.
            asked = pool.take_back(queue)
            if waiting or asked:
                log.info("queue %s paused: %d claimed jobs that had not started go back",
                         queue, len(waiting) + asked)
            if waiting:
                self.outbox.released(waiting, now)

    def _renew(self, pool: Pool) -> None:
        if self.outbox.pending.checkpoints:
            # Checkpoints ride on the renewal: written now, with whatever else waits.
            self._write_outbox(self.clock())
        sent = self.clock()
        held = pool.running() + self.ledger.waiting_jobs()
        if not held:
            self.leases_renewed_at = sent
            return
        fenced = self.db.call(lambda s: s.renew([(j.id, j.attempt) for j in held]), None,
                              "renewing leases")
        if fenced is None:
            return
        self.leases_renewed_at = sent
        self.metrics.renewed(len(held) - len(fenced))
        if fenced:
            self.metrics.fenced("renew", len(fenced))
        for job_id in fenced:
            # The lease moved on (rescued elsewhere, or cancelled by an operator): stop.
            log.warning("job %d: lease lost (rescued or cancelled); abandoning it", job_id)
            pool.cancel(job_id)
        self.ledger.drop_waiting(set(fenced))

    # -- self-fencing -------------------------------------------------------------------
    def _hold_back(self, pool: Pool) -> None:
        """The database is away: start nothing more until it answers. An outcome
        written late is fine, but one that cannot be written before the job's lease is
        rescued elsewhere means the job runs again; so only what already runs goes on,
        and the jobs queued in children's pipes are asked back (each comes back
        unstarted and is released, or runs if its child had taken it first)."""
        self._held_back = self.db.outages
        asked = sum(pool.take_back(queue) for queue in self.queues)
        if asked:
            log.info("database away: %d jobs queued in children go back unstarted", asked)

    def _fence_at(self, pool: Pool) -> float | None:
        """When this supervisor must stop acting on what it holds, unless a renewal
        comes first (None: it holds nothing a lease or a slice covers)."""
        held = pool.held_count() or any(self.ledger.waiting.values())
        limits = self.planner.limits
        slice_at = limits.slices_lapse_at(pool.occupied()) if limits.allowed else None
        if not held:
            return slice_at
        lease_at = self.leases_renewed_at + self.config.lease_ttl - self.fence_margin
        return lease_at if slice_at is None else min(lease_at, slice_at)

    def _check_fence(self, now: float, pool: Pool) -> None:
        """Fence when the leases or slices went unrenewed too long; lift it once they
        are renewed again."""
        if not (pool.held_count() or any(self.ledger.waiting.values())):
            self.leases_renewed_at = now  # nothing leased: a claim's lease starts later
        fence_at = self._fence_at(pool)
        overdue = fence_at is not None and now >= fence_at
        if overdue:
            if not self.fenced:
                self._fence(now, pool)
        elif self.fenced and self.db.up:
            self.fenced = False
            self.reporter.releasing = not self.claimer.accepting  # draining keeps it
            log.warning("leases renewed again: this supervisor starts jobs again")

    def _fence(self, now: float, pool: Pool) -> None:
        """Stop acting on leases another supervisor may soon take over: what waits here
        goes back, running jobs are interrupted (uncharged), nothing starts."""
        self.fenced = True
        self.reporter.releasing = True  # jobs that come back from pipes go back too
        unrenewed = now - self.leases_renewed_at
        log.error("leases not renewed for %.1f s (lease %.0f s, margin %.1f s): the database "
                  "does not answer; interrupting %d running jobs and starting nothing until "
                  "it does (their attempts are not counted)", unrenewed,
                  self.config.lease_ttl, self.fence_margin, pool.busy_count())
        waiting = self.ledger.take_waiting()
        self.outbox.released(waiting, now)
        self._interrupt_running(pool)

    def _interrupt_running(self, pool: Pool) -> None:
        """Stop every running job before its lease can be taken over. This is the one
        place where a fenced supervisor stops its jobs: a stopping notice to the
        children goes here: each running job is told, and killed ``FENCE_GRACE`` later
        unless it hands itself back first (``engine.notices``)."""
        notify_fence(pool)

    def _cancelled(self, job_ids: set[int], pool: Pool) -> None:
        for job_id in job_ids:
            if pool.cancel(job_id):
                log.warning("job %d cancelled by an operator: its child is being killed", job_id)
        self.ledger.drop_waiting(job_ids)

    def _reconnected(self, now: float, pool: Pool) -> None:
        """Write what we hold, renew our leases, give back what a lost claim answer left
        under our name; rescue nothing until every live supervisor could renew."""
        self.rescue_hold_until = now + self.config.lease_ttl
        self.claimer.cursors.forget()  # notifications sent while away were lost
        self.flush(now)
        self._renew(pool)
        held = ([j.id for j in pool.running()] + [j.id for j in self.ledger.waiting_jobs()]
                + self.outbox.held_ids())
        returned: list[int] = self.db.call(lambda s: s.reconcile(held), [],
                                           "reconciling claims")
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
            self._poll(now, pool)
            return
        nothing_later: tuple[int, datetime | None] = (0, None)
        left, next_at = db.call(lambda s: s.left_for_later(self.queues, self.kinds),
                                nothing_later, "checking for work")
        later = (f"; {left} jobs are due later than the {horizon:.0f} s horizon, the next at "
                 f"{next_at:%Y-%m-%d %H:%M:%S %Z}" if left else "")
        none_waiting: dict[str, int] = {}
        unhandled = db.call(lambda s: s.unhandled_waiting(self.queues, self.kinds), none_waiting,
                            "checking for work")
        if unhandled:
            shown = ", ".join(f"{kind} ({n})" for kind, n in list(unhandled.items())[:10])
            more_kinds = f" and {len(unhandled) - 10} more kinds" if len(unhandled) > 10 else ""
            log.warning("burst: %d jobs in %s wait for kinds this supervisor does not "
                        "serve: %s%s; they stay queued for a supervisor whose --app defines "
                        "them and that can hold what they declare",
                        sum(unhandled.values()), ",".join(self.queues), shown, more_kinds)
        log.info("burst: no more work in %s%s; exiting", ",".join(self.queues), later)
        self.burst_finished = True
