"""Lease keeping and self-fencing: the engine's hold on what it claimed.

Leases are renewed every third of a lease (``RENEWALS_PER_LEASE``), global-limit slices
when ``limits`` says they are due. Database outages are ridden out: while the database
is away nothing new starts, and what children hold queued is asked back
(``hold_back``). After a reconnect the engine first writes what it holds, renews its own
leases and gives back rows that a lost claim answer left running under its name; it
takes no part in rescuing expired leases for one lease period (``rescue_hold_until``),
so every live supervisor has renewed its own jobs before anyone judges them lost. A
database that hangs is an outage like any other (the client-side deadline of
``supervisor.db``), so the same rules hold after a hang.

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
from collections.abc import Callable
from typing import TYPE_CHECKING

from shared import defaults
from supervisor.db import Renewal
from supervisor.engine.notices import notify_fence

if TYPE_CHECKING:
    from supervisor.config import RunConfig
    from supervisor.db import Database
    from supervisor.engine.claims import Claimer
    from supervisor.engine.ledger import Ledger
    from supervisor.engine.outbox import Outbox
    from supervisor.engine.planner import Scheduler
    from supervisor.engine.reporting import OutcomeReporter
    from supervisor.observe import SupervisorMetrics
    from supervisor.pool import Pool

log = logging.getLogger("supervisor.engine")

# Leases are renewed this many times per lease period (shared.defaults.fence_margin
# counts on it: a renewal late by less than a third of a lease never fences).
RENEWALS_PER_LEASE = 3


class LeaseKeeper:
    """Renews this supervisor's leases and slices, fences when they lapse, and rides
    out database outages."""

    def __init__(self, config: RunConfig, db: Database, planner: Scheduler, ledger: Ledger,
                 outbox: Outbox, reporter: OutcomeReporter, claimer: Claimer,
                 metrics: SupervisorMetrics, queues: list[str], now: float, clock,
                 write_outbox: Callable[[float], None]) -> None:
        self.config = config
        self.db = db
        self.planner = planner
        self.ledger = ledger
        self.outbox = outbox
        self.reporter = reporter
        self.claimer = claimer
        self.metrics = metrics
        self.queues = queues
        self.clock = clock
        self.write_outbox = write_outbox  # the engine's write (it settles failures too)
        self.next_renew = now + config.lease_ttl / RENEWALS_PER_LEASE
        self.fence_margin = defaults.fence_margin(config.lease_ttl, config.database_deadline)
        planner.limits.margin = self.fence_margin
        # When the last renewal that covered every job held here was sent (a lease runs
        # from the moment its statement left, at the latest): self-fencing counts from it.
        self.leases_renewed_at = now
        self.fenced = False  # leases unrenewed too long: running nothing until renewed
        self.rescue_hold_until = 0.0  # after a reconnect: rescue nothing before this
        self.held_back = 0  # the outage whose queued jobs were taken back from children

    # -- renewals -----------------------------------------------------------------------
    def tick(self, now: float, pool: Pool) -> None:
        """Renew the leases and the global-limit slices that are due."""
        if now >= self.next_renew:
            self.next_renew = now + self.config.lease_ttl / RENEWALS_PER_LEASE
            self.renew(pool)
        if self.planner.limits.due(now):
            self.refresh_limits(now, pool)

    def renew(self, pool: Pool) -> None:
        """Renew the lease of every job held here; a job whose lease moved on stops."""
        if self.outbox.pending.checkpoints:
            # Checkpoints ride on the renewal: written now, with whatever else waits.
            self.write_outbox(self.clock())
        sent = self.clock()
        held = pool.running() + self.ledger.waiting_jobs()
        if not held:
            self.leases_renewed_at = sent
            return
        fenced = self.db.call(lambda s: s.renew([Renewal(j.id, j.attempt) for j in held]), None,
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

    def refresh_limits(self, now: float, pool: Pool) -> None:
        """Read and renew this supervisor's slices of the global limits."""
        ledger = self.ledger
        # A slice must cover every job handed to a child, started or not: counting
        # only confirmed starts gave slots back that a START on its way would use.
        db = self.db
        db.call(lambda s: self.planner.refresh_limits(
            s, now, pool.size(), pool.occupied(), ledger.waiting_counts(), db.listen),
            None, "renewing global limits")

    # -- outages ------------------------------------------------------------------------
    def hold_back(self, pool: Pool) -> None:
        """The database is away: start nothing more until it answers. An outcome
        written late is fine, but one that cannot be written before the job's lease is
        rescued elsewhere means the job runs again; so only what already runs goes on,
        and the jobs queued in children's pipes are asked back (each comes back
        unstarted and is released, or runs if its child had taken it first). Asked once
        per outage."""
        if self.held_back == self.db.outages:
            return
        self.held_back = self.db.outages
        asked = sum(pool.take_back(queue) for queue in self.queues)
        if asked:
            log.info("database away: %d jobs queued in children go back unstarted", asked)

    def reconnected(self, now: float, pool: Pool) -> None:
        """Write what we hold, renew our leases, give back what a lost claim answer left
        under our name; rescue nothing until every live supervisor could renew."""
        self.rescue_hold_until = now + self.config.lease_ttl
        self.claimer.cursors.forget()  # notifications sent while away were lost
        self.write_outbox(now)
        self.renew(pool)
        self.give_back_lost_claims(pool)

    def give_back_lost_claims(self, pool: Pool) -> None:
        """Release the jobs leased under our name that we do not hold: a claim whose
        answer was lost with its connection took them, and they never reached us. On a
        reconnect, and at exit (a drain's write cut short drops the claim in flight too;
        without this its jobs waited out their lease)."""
        if not self.db.up:
            return
        held = ([j.id for j in pool.running()] + [j.id for j in self.ledger.waiting_jobs()]
                + self.outbox.held_ids())
        returned: list[int] = self.db.call(lambda s: s.reconcile(held), [],
                                           "reconciling claims")
        if returned:
            log.warning("%d jobs claimed just before the connection was lost never reached "
                        "this supervisor; they are available again, attempt not counted",
                        len(returned))
            self.metrics.reconciled(len(returned))

    def cancelled(self, job_ids: set[int], pool: Pool) -> None:
        """Jobs an operator cancelled: their leases are no longer ours; stop them."""
        for job_id in job_ids:
            if pool.cancel(job_id):
                log.warning("job %d cancelled by an operator: its child is being killed", job_id)
        self.ledger.drop_waiting(job_ids)

    def may_lead(self, now: float) -> bool:
        """Whether this supervisor may take part in rescuing expired leases now."""
        return now >= self.rescue_hold_until

    # -- self-fencing -------------------------------------------------------------------
    def fence_at(self, pool: Pool) -> float | None:
        """When this supervisor must stop acting on what it holds, unless a renewal
        comes first (None: it holds nothing a lease or a slice covers, or it is fenced
        already: nothing is due for the fence until a renewal lifts it)."""
        return None if self.fenced else self._deadline(pool)

    def _deadline(self, pool: Pool, holds: bool | None = None) -> float | None:
        """The fence's time; ``holds``: ``_holds(pool)``, when the caller knows it."""
        limits = self.planner.limits
        slice_at = limits.slices_lapse_at(pool.occupied()) if limits.allowed else None
        if not (self._holds(pool) if holds is None else holds):
            return slice_at
        lease_at = self.leases_renewed_at + self.config.lease_ttl - self.fence_margin
        return lease_at if slice_at is None else min(lease_at, slice_at)

    def check(self, now: float, pool: Pool) -> None:
        """Fence when the leases or slices went unrenewed too long; lift it once they
        are renewed again."""
        holds = self._holds(pool)
        if not holds:
            self.leases_renewed_at = now  # nothing leased: a claim's lease starts later
        fence_at = self._deadline(pool, holds)
        overdue = fence_at is not None and now >= fence_at
        if overdue:
            if not self.fenced:
                self._fence(now, pool)
        elif self.fenced and self.db.up:
            self.fenced = False
            self.reporter.releasing = not self.claimer.accepting  # draining keeps it
            log.warning("leases renewed again: this supervisor starts jobs again")

    def _holds(self, pool: Pool) -> bool:
        return bool(pool.held_count() or any(self.ledger.waiting.values()))

    def _fence(self, now: float, pool: Pool) -> None:
        """Stop acting on leases another supervisor may soon take over: what waits here
        goes back, running jobs are interrupted (uncharged), nothing starts. This is
        the one place where a fenced supervisor stops its jobs: each running job is
        told, and killed ``FENCE_GRACE`` later unless it hands itself back first
        (``engine.notices``)."""
        self.fenced = True
        self.reporter.releasing = True  # jobs that come back from pipes go back too
        unrenewed = now - self.leases_renewed_at
        log.error("leases not renewed for %.1f s (lease %.0f s, margin %.1f s): the database "
                  "does not answer; interrupting %d running jobs and starting nothing until "
                  "it does (their attempts are not counted)", unrenewed,
                  self.config.lease_ttl, self.fence_margin, pool.busy_count())
        waiting = self.ledger.take_waiting()
        self.outbox.released(waiting, now)
        notify_fence(pool)
