"""Housekeeping: what the claim does not wait for.

The maintenance round (heartbeat, and for the leader rescue, expiry and pruning, the
per-minute ``history``), the crash ``breaker``, firing periodic jobs (``schedules``),
each kind's measured memory (read while a memory budget applies), the look at who holds
the MVCC horizon, and in burst mode the check that no work is left. The engine runs it
after the claim is sent, so these round trips overlap the claim's execution.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from shared import defaults
from supervisor.db import LaterWork
from supervisor.engine.horizon import HorizonWatch
from supervisor.engine.maintenance import Maintenance, MaintenanceSettings

if TYPE_CHECKING:
    from supervisor.admission import Admission
    from supervisor.breaker import Breaker
    from supervisor.config import RunConfig
    from supervisor.db import Database, HistoryWriter
    from supervisor.engine.claims import Claimer
    from supervisor.engine.explain import Explainer
    from supervisor.engine.ledger import Ledger
    from supervisor.engine.outbox import Outbox
    from supervisor.engine.polling import Poller
    from supervisor.engine.reporting import OutcomeReporter
    from supervisor.observe import SupervisorMetrics
    from supervisor.pool import Pool
    from supervisor.schedules import Schedules

log = logging.getLogger("supervisor.engine")

BURST_CHECK_INTERVAL = 0.1  # seconds between burst mode's checks for work left
# Each kind's default memory reservation (its measured size: p95 of recent
# max_rss_bytes, the largest under 20 samples) is read this often while a memory budget
# applies: cached, never asked per claim; what each attempt here used raises it at once.
KIND_MEMORY_EVERY = 60.0
UNHANDLED_KINDS_SHOWN = 10  # a burst's last log line names this many unserved kinds


class Housekeeping:
    """The maintenance round, the breaker, schedules, kind memory, the horizon look and
    the end of a burst: each when it is due."""

    def __init__(self, config: RunConfig, db: Database, queues: list[str], kinds: list[str],
                 *, poller: Poller, breaker: Breaker, reporter: OutcomeReporter,
                 claimer: Claimer, ledger: Ledger, outbox: Outbox, admission: Admission,
                 explainer: Explainer,
                 metrics: SupervisorMetrics, schedules: Schedules | None,
                 history: HistoryWriter | None, now: float, clock) -> None:
        """``history``: the leader's per-minute history writer (None: none is written)."""
        self.config = config
        self.db = db
        self.queues = queues
        self.kinds = kinds
        self.poller = poller
        self.breaker = breaker
        self.reporter = reporter
        self.claimer = claimer
        self.ledger = ledger
        self.outbox = outbox
        self.admission = admission
        self.explainer = explainer
        self.metrics = metrics
        self.schedules = schedules
        self.history = history
        self.maintenance = Maintenance(
            queues, MaintenanceSettings(interval=config.maintenance_interval,
                                        retention=config.retention,
                                        discarded_retention=config.discarded_retention),
            clock,
            history)
        self.horizon_watch = HorizonWatch(config.horizon_warn_after, metrics)
        self.next_horizon_look = now  # the first round looks: a hold may predate us
        self.next_fresh_plans = now + defaults.PLANS_FRESH_EVERY
        self.next_kind_memory = now  # when each kind's default memory is read again
        self.next_burst_check = now
        self.burst_finished = False  # burst mode: no work left; the arbiter drains

    def deadlines(self) -> list[float]:
        """When a round, the history's statement or a schedule is due at the latest."""
        due = [self.maintenance.next_round]
        history_at = self.history.next_deadline() if self.history is not None else None
        if history_at is not None:
            due.append(history_at)
        fire_at = self.schedules.next_due() if self.schedules is not None else None
        if fire_at is not None:
            due.append(fire_at)
        return due

    def run(self, now: float, pool: Pool, *, may_lead: bool) -> None:
        """Whatever is due of the round, the breaker, kind memory, the horizon look and
        the schedules; ``may_lead``: this supervisor may rescue expired leases."""
        if self.reporter.take_native_news():
            # A child just went native: say so in the registry now, not a round later.
            self.maintenance.next_round = min(self.maintenance.next_round, now)
        if self.maintenance.due(now):
            self._round(now, pool, may_lead)
        if self.breaker.pending:
            self._record_crashes(now)
        if self.admission.budget.memory is not None and now >= self.next_kind_memory:
            self.next_kind_memory = now + KIND_MEMORY_EVERY
            self.save_kind_memory()
            found = self.db.call(lambda s: s.kind_memory_p95(self.kinds), None,
                                 "reading each kind's memory use")
            if found is not None:
                self.admission.measured(found)
        if now >= self.next_horizon_look:
            # Looked at for the warning, and for the passes from an index's start (the
            # claim cursors' poll, the chores' full scans), which a held horizon makes
            # costlier the longer it is held.
            self.next_horizon_look = now + defaults.HORIZON_LOOK_EVERY
            report = self.db.call(lambda s: s.horizon(), None,
                                  "reading who holds the MVCC horizon")
            if report is not None:
                self.horizon_watch.looked(report, now)
                self.claimer.cursors.horizon_held(report.held_seconds, now)
                self.maintenance.horizon_held(report.held_seconds)
        if now >= self.next_fresh_plans:
            # No deadline of its own: the round's wakes carry it (at most an interval late).
            self.next_fresh_plans = now + defaults.PLANS_FRESH_EVERY
            self.db.refresh_plans()
        schedules = self.schedules
        if schedules is not None and now >= (schedules.next_due() or float("inf")):
            self.db.call(lambda s: schedules.fire_due(s.connection), 0, "firing schedules")

    def _round(self, now: float, pool: Pool, may_lead: bool) -> None:
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
            may_lead=may_lead), 0, "maintenance")
        if rescued:
            self.metrics.rescued(rescued)

    def _record_crashes(self, now: float) -> None:
        tripped = self.db.call(self.breaker.record, None, "recording crashes for the breaker")
        for trip in tripped or ():
            log.warning("kind %s paused on every supervisor for %.0f s: %d crashes "
                        "within %.0f s (breaker_failures %d)", trip.kind,
                        self.config.breaker_cooldown, trip.crashes, self.config.breaker_window,
                        self.config.breaker_failures)
            self.metrics.kind_tripped(trip.kind)
        if tripped:
            self.poller.read_kind_pauses(now)

    def count_crashes(self) -> None:
        """Hand the crashes the reporter saw to the breaker (written after the claim)."""
        for kind in self.reporter.crashes:
            self.breaker.crashed(kind)
        self.reporter.crashes.clear()

    def save_kind_memory(self) -> None:
        """Keep the kind sizes that rose here (issue 51), so a supervisor that starts
        later admits its first jobs by them; kept for the next try if the database is
        away."""
        unsaved = self.admission.take_unsaved()
        if unsaved and self.db.call(lambda s: s.save_kind_memory(unsaved), None,
                                    "keeping each kind's memory use") is None:
            self.admission.not_saved(unsaved)

    def _settled(self, pool: Pool) -> bool:
        """Burst mode, not draining, and nothing runs, nothing is held, written or
        claimed: only the database can say whether work is left."""
        return (self.config.burst and self.claimer.accepting
                and not (pool.busy_count() or not self.ledger.idle() or self.outbox.count()
                         or not self.db.up or self.claimer.in_flight is not None))

    def burst_check_at(self, pool: Pool) -> float | None:
        """When burst mode next asks the table whether work is left (None: not now)."""
        return self.next_burst_check if self._settled(pool) else None

    def check_burst(self, now: float, pool: Pool) -> None:
        """Burst mode: once nothing runs, is held or written here, ask the table whether
        work is left; none: ``burst_finished``, and the arbiter drains."""
        if now < self.next_burst_check or not self._settled(pool):
            return
        # Only the database checks wait between tries: once the last job's outcome is
        # written the check runs in the same turn.
        self.next_burst_check = now + BURST_CHECK_INTERVAL
        db, queues, kinds = self.db, self.queues, self.kinds
        promoted = db.call(lambda s: s.promote_due(), 0, "promoting due jobs")
        horizon = self.config.burst_horizon
        more = promoted or db.call(lambda s: s.has_due_work(queues, kinds, horizon),
                                   True, "checking for work")
        if more:
            self.poller.poll(now, pool)
            return
        later_work = db.call(lambda s: s.left_for_later(queues, kinds), LaterWork(),
                             "checking for work")
        left, next_at = later_work.count, later_work.earliest
        later = (f"; {left} jobs are due later than the {horizon:.0f} s horizon, the next at "
                 f"{next_at:%Y-%m-%d %H:%M:%S %Z}" if left else "")
        none_waiting: dict[str, int] = {}
        unhandled = db.call(lambda s: s.unhandled_waiting(queues, kinds), none_waiting,
                            "checking for work")
        if unhandled:
            shown = ", ".join(f"{kind} ({n})" for kind, n
                              in list(unhandled.items())[:UNHANDLED_KINDS_SHOWN])
            more_kinds = (f" and {len(unhandled) - UNHANDLED_KINDS_SHOWN} more kinds"
                          if len(unhandled) > UNHANDLED_KINDS_SHOWN else "")
            log.warning("burst: %d jobs in %s wait for kinds this supervisor does not "
                        "serve: %s%s; they stay queued for a supervisor whose --app defines "
                        "them and that can hold what they declare",
                        sum(unhandled.values()), ",".join(queues), shown, more_kinds)
        log.info("burst: no more work in %s%s; exiting", ",".join(queues), later)
        self.burst_finished = True
