"""The parent process: one thread, one selector loop.

The loop waits on the signal wakeup fd, every child's pipe, the LISTEN connection and a
timeout equal to the next deadline. Each turn it reads the children's outcomes, hands
waiting jobs to idle children, writes finished jobs in batched fenced statements,
claims what can start now, and renews the leases of what it holds. Signal handlers only
record; all work happens in the loop (``handle_<signal>`` methods, as in gunicorn).
"""

from __future__ import annotations

import logging
import random
import selectors
import signal
import time

from setproctitle import setproctitle

from shared import jobs
from shared.jobs import ClaimedJob
from supervisor.config import RunConfig
from supervisor.db.database import Database
from supervisor.db.nonblocking import AsyncQuery
from supervisor.engine.claims import Claimer
from supervisor.engine.ledger import Ledger
from supervisor.engine.maintenance import Maintenance, MaintenanceSettings, make_owner
from supervisor.engine.outbox import OutcomeWriter
from supervisor.engine.planner import Scheduler
from supervisor.engine.reporting import OutcomeReporter
from supervisor.observe.httpserver import MetricsServer
from supervisor.observe.metrics import SupervisorMetrics
from supervisor.observe.progress import BurstProgress
from supervisor.pool import Pool, PoolHalted
from supervisor.schedules import Schedules, specs_from_registry
from supervisor.signals import SignalInbox
from workers.registry import REGISTRY

log = logging.getLogger("supervisor.arbiter")

RUNNING, DRAINING, STOPPING = "running", "draining", "stopping"
HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP,
                   signal.SIGTTIN, signal.SIGTTOU, signal.SIGCHLD)
MAX_WAIT = 1.0  # the loop wakes at least this often, whatever else is due
STOP_TIMEOUT = 10.0  # after the last kill, how long to wait for children to be reaped


class Arbiter:
    """Claims, schedules, dispatches and drains for one supervisor process."""

    def __init__(self, config: RunConfig, dsn: str, queues: list[str], kinds: list[str],
                 *, app_modules: list[str] | None = None, progress: BurstProgress | None = None,
                 clock=time.monotonic) -> None:
        self.config = config
        self.queues = queues
        self.kinds = kinds
        self.app_modules = app_modules or []
        self.clock = clock
        self.owner = make_owner()
        self.selector = selectors.DefaultSelector()
        self.db = Database(dsn, self.owner, config.lease_ttl, self.selector, clock=clock,
                           synchronous_commit=config.synchronous_commit)
        self.pool = Pool(config.pool_settings(), self.selector, clock=clock)
        self.ledger = Ledger()
        self.metrics = SupervisorMetrics(self.owner)
        self.reporter = OutcomeReporter(self.ledger, self.metrics)
        self.metrics_server: MetricsServer | None = None
        self.scheduler = Scheduler(config, queues, clock())
        self.maintenance = Maintenance(
            self.owner, queues,
            MaintenanceSettings(interval=config.maintenance_interval, retention=config.retention),
            clock=clock)
        self.claimer = Claimer(self.db, self.scheduler, self.ledger, self.metrics, kinds,
                               self.pool.size, lambda: self.state == RUNNING, self._dispatch,
                               config.default_timeout)
        self.writer = OutcomeWriter(self.ledger, self.db, self.metrics, config.flush_interval,
                                    lambda: self.claimer.in_flight is not None)
        self.progress = progress
        self.schedules = Schedules(specs_from_registry(REGISTRY.values()), self.owner, clock=clock)
        self.state = RUNNING
        self.exit_code = 0
        self.halt_reason: str | None = None
        self.inbox = SignalInbox(HANDLED_SIGNALS)
        self.drain_deadline: float | None = None
        self.stop_deadline: float | None = None
        now = clock()
        self.next_poll = now
        self.next_renew = now + config.lease_ttl / 3
        self.next_burst_check = now
        self.next_title = now

    # -- life cycle ----------------------------------------------------------------------
    def run(self) -> int:
        """Serve until drained or stopped; returns the process exit code. Raises
        ``DatabaseUnavailable`` if the database cannot be reached at start."""
        self.db.open()
        if self.config.metrics_port is not None:
            self.metrics_server = MetricsServer(self.config.metrics_port, self.metrics.render,
                                                self.selector)
            log.info("metrics on http://%s:%d/metrics", self.metrics_server.host,
                     self.metrics_server.port)
        self.inbox.install(self.selector)
        log.info("supervisor %s starting %d children for queues %s", self.owner,
                 self.config.children, ",".join(self.queues))
        self.pool.start()
        try:
            while not self._finished():
                self.turn()
        finally:
            self._collect_outcomes(self.clock())
            self.writer.flush(force=True)
            self.pool.kill_all()
            self.db.call(self.maintenance.leave, None)
            self.db.close()
            if self.metrics_server is not None:
                self.metrics_server.close()
            self.inbox.uninstall()
            if self.progress is not None:
                self.progress.close(self.ledger.finished)
        log.info("supervisor %s stopped (%s)", self.owner,
                 ", ".join(f"{n} {k}" for k, n in sorted(self.ledger.finished.items())) or "idle")
        return self.exit_code

    def turn(self) -> None:
        """One pass of the loop: wait, then do everything that is due."""
        for key, mask in self.selector.select(self._timeout()):
            if key.data is self.pool:
                self.pool.handle_event(key, mask)
            elif key.data is self.db:
                self.db.handle_event(key, mask)
            elif key.data is self.inbox:
                self.inbox.handle_event(key, mask)
            elif isinstance(key.data, AsyncQuery):
                key.data.handle_event(key, mask)
            elif key.data is self.metrics_server:
                self.metrics_server.handle_event(key, mask)
        self._handle_signals()
        now = self.clock()
        try:
            self.pool.reap()
            self.pool.tick()
        except PoolHalted as exc:
            self._halt(str(exc))
        self._collect_outcomes(now)
        self._dispatch()
        if not self.db.up and self.db.maybe_reconnect():
            self.next_poll = now  # look at the queues again right away
        self.scheduler.wake(self.db.take_notified())
        for job_id in self.db.take_cancelled():
            if self.pool.cancel(job_id):
                log.warning("job %d cancelled by an operator: its child is being killed", job_id)
        self._timers(now)
        if self.state == RUNNING:
            # A claim carries pending completions; when they are due, claim even a
            # small batch so they need no statement of their own.
            self.claimer.claim(now, eager=self.writer.due(now))
            self._dispatch()
        if self.writer.due(now):
            self.writer.flush()
        if self.state == RUNNING:
            self._check_burst(now)
        self._check_stop(now)
        self._show(now)

    def _finished(self) -> bool:
        if self.state != STOPPING and self.state != DRAINING:
            return False
        if self.pool.alive() == 0 and self.claimer.in_flight is None:
            return True
        # Never wait forever: not for a child that will not be reaped, nor for a claim
        # a hung database never answers (its leases expire and it is rescued).
        deadline = self.stop_deadline
        if deadline is None and self.drain_deadline is not None:
            deadline = self.drain_deadline + STOP_TIMEOUT
        return deadline is not None and self.clock() >= deadline

    # -- signals -------------------------------------------------------------------------
    def _handle_signals(self) -> None:
        for signum in self.inbox.take():
            name = signal.Signals(signum).name[3:].lower()
            getattr(self, f"handle_{name}")()

    def handle_term(self) -> None:
        """Drain: stop claiming, let running jobs finish within the grace; a second
        TERM or INT stops at once."""
        if self.state == RUNNING:
            log.info("SIGTERM: draining (grace %.0f s)", self.config.grace)
            self.begin_drain()
        else:
            self.stop_now("second stop signal")

    handle_int = handle_term

    def handle_quit(self) -> None:
        """Stop at once: kill the children, put their jobs back."""
        self.stop_now("SIGQUIT")

    def handle_hup(self) -> None:
        """Reload the handler modules, then replace every child once it is idle."""
        from supervisor.apps import reload_apps

        if reload_apps(self.app_modules):
            log.info("SIGHUP: handler modules reloaded; recycling children")
            self.pool.recycle_all()

    def handle_ttin(self) -> None:
        """One more child."""
        self.pool.resize(self.pool.size() + 1)
        log.info("SIGTTIN: %d children", self.pool.size())

    def handle_ttou(self) -> None:
        """One child fewer (never below one)."""
        if self.pool.size() > 1:
            self.pool.resize(self.pool.size() - 1)
        log.info("SIGTTOU: %d children", self.pool.size())

    def handle_chld(self) -> None:
        """A child changed state: reap it now rather than at the end of the turn."""
        self.pool.reap()

    # -- stopping ------------------------------------------------------------------------
    def begin_drain(self) -> None:
        """Stop claiming, release what has not started, let running jobs finish."""
        now = self.clock()
        self.state = DRAINING
        self.drain_deadline = now + self.config.grace
        released = self.ledger.release_waiting(now)
        if released:
            log.info("released %d claimed jobs that had not started", released)
        self.pool.stop()
        self.writer.flush()

    def stop_now(self, why: str) -> None:
        """Kill every child now; running and waiting jobs go back to available."""
        if self.state == STOPPING:
            return
        log.warning("%s: stopping now, %d running jobs go back", why, self.pool.busy_count())
        now = self.clock()
        self.state = STOPPING
        self.ledger.release_waiting(now)
        self.pool.interrupt_all(jobs.FAIL_SHUTDOWN)
        self.pool.kill_all()
        self.stop_deadline = now + STOP_TIMEOUT
        self._collect_outcomes(now)
        self.writer.flush()

    def _halt(self, why: str) -> None:
        log.error("halting: %s", why)
        self.exit_code = 1
        self.halt_reason = why
        self.stop_now("crash loop")

    def _check_stop(self, now: float) -> None:
        if (self.state == DRAINING and self.drain_deadline is not None
                and now >= self.drain_deadline and self.pool.busy_count() > 0):
            log.warning("grace of %.0f s is over: killing %d running jobs, they go back",
                        self.config.grace, self.pool.busy_count())
            self.stop_now("end of grace")

    # -- jobs ----------------------------------------------------------------------------
    def _collect_outcomes(self, now: float) -> None:
        self.reporter.record(self.pool.take_outcomes(), now)

    def _dispatch(self) -> None:
        """Hand waiting jobs to idle children, the queue furthest below its share first."""
        pool, ledger = self.pool, self.ledger
        if pool.idle_count() == 0:
            return
        if len(self.queues) == 1:  # the common case needs no share arithmetic
            queue_jobs = ledger.waiting.get(self.queues[0])
            while queue_jobs and pool.idle_count() > 0:
                job = queue_jobs.popleft()
                if not pool.dispatch(job):
                    queue_jobs.appendleft(job)
                    return
                ledger.started(job)
            return
        size = pool.size()
        while pool.idle_count() > 0:
            waiting = ledger.waiting_counts()
            queue = self.scheduler.next_queue(size, waiting, ledger.running) if waiting else None
            if queue is None:
                return
            job = ledger.pop_waiting(queue)
            if not pool.dispatch(job):
                ledger.unpop_waiting(job)
                return
            ledger.started(job)

    def _held_jobs(self) -> list[ClaimedJob]:
        return self.pool.running() + self.ledger.waiting_jobs()

    def _timers(self, now: float) -> None:
        if now >= self.next_poll:
            # A fixed interval with jitter: no exponential backoff, it costs throughput.
            interval = self.config.poll_interval
            self.next_poll = now + interval * random.uniform(0.8, 1.2)
            if self.db.up:
                self._poll()
        if now >= self.next_renew:
            self.next_renew = now + self.config.lease_ttl / 3
            self._renew()
        if self.maintenance.due(now) and self.db.up:
            self.db.call(lambda s: self.maintenance.run_round(
                s, children=self.pool.size(), busy=self.pool.busy_count(),
                info={"kinds": self.kinds}), None)
        if now >= (self.schedules.next_due() or float("inf")) and self.db.up:
            self.db.call(lambda s: self.schedules.fire_due(s.conn), 0)

    def _poll(self) -> None:
        """Promote due scheduled/retryable jobs and ask which queues hold work."""
        self.db.call(lambda s: s.promote_due(), 0)
        with_work = self.db.call(lambda s: s.queues_with_work(self.queues, self.kinds), None)
        if with_work is not None:
            self.scheduler.observed(with_work | self.db.take_notified())

    def _renew(self) -> None:
        held = self._held_jobs()
        if not held or not self.db.up:
            return
        fenced = self.db.call(lambda s: s.renew([(j.id, j.attempt) for j in held]), None)
        if fenced is None:
            return
        self.metrics.renewed(len(held) - len(fenced))
        if fenced:
            self.metrics.fenced("renew", len(fenced))
        for job_id in fenced:
            # The lease moved on (rescued elsewhere, or cancelled by an operator): stop.
            log.warning("job %d: lease lost (rescued or cancelled); abandoning it", job_id)
            self.pool.cancel(job_id)
        self.ledger.drop_waiting(set(fenced))

    def _check_burst(self, now: float) -> None:
        if not self.config.burst or now < self.next_burst_check:
            return
        self.next_burst_check = now + 0.1
        if (self.pool.busy_count() or not self.ledger.idle() or not self.db.up
                or self.claimer.in_flight is not None):
            return
        promoted = self.db.call(lambda s: s.promote_due(), 0)
        more = promoted or self.db.call(lambda s: s.has_due_work(self.queues, self.kinds), True)
        if more:
            self._poll()
            return
        log.info("burst: no more work in %s; exiting", ",".join(self.queues))
        self.begin_drain()

    # -- display -------------------------------------------------------------------------
    def _timeout(self) -> float:
        now = self.clock()
        due = [now + MAX_WAIT, self.next_poll, self.next_renew, self.maintenance.next_round]
        server = self.metrics_server
        for t in (self.pool.next_deadline(), self.db.next_retry(),
                  server.next_deadline() if server is not None else None,
                  self.scheduler.next_token_at(now), self.drain_deadline, self.stop_deadline,
                  self.schedules.next_due()):
            if t is not None:
                due.append(t)
        flush_at = self.writer.next_flush_at()
        if flush_at is not None:
            due.append(flush_at)
        if self.config.burst and self.pool.busy_count() == 0:
            due.append(self.next_burst_check)
        if self.progress is not None:
            due.append(self.progress.next_update)
        return max(0.0, min(due) - now)

    def _show(self, now: float) -> None:
        if self.metrics_server is not None:
            self.metrics_server.tick(now)
        if now >= self.next_title:
            self.next_title = now + 0.5
            self.metrics.children(self.pool.busy_count(), self.pool.idle_count())
            self.metrics.database_up(self.db.up)
            setproctitle(f"supervisor: master [{self.pool.busy_count()}/{self.pool.size()} busy]"
                         f" queues={','.join(self.queues)}")
        if self.progress is not None and now >= self.progress.next_update:
            counts = self.db.call(lambda s: s.queue_counts(self.queues), None)
            self.progress.update(now, self.ledger.finished, counts)
