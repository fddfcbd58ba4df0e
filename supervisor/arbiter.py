"""The arbiter: process supervision for one supervisor, in one thread and one loop.

As in gunicorn's arbiter: signal handlers only record (``SignalInbox``), the loop handles
them as ``handle_<signal>`` methods, and the arbiter owns the drain/stop state machine and
the pool's life. The job flow (claims, writes, leases, maintenance) is the ``Engine``'s;
each turn the arbiter waits on the selector until the earliest deadline, lets every
ready fd do its work, then reaps and ticks the pool and ticks the engine.

States: RUNNING -> DRAINING (TERM/INT, or a burst that ran out of work: claim nothing,
release what has not started, let running jobs finish within the grace) -> STOPPING
(QUIT, a second Ctrl-C, a SIGTERM more than ``DUPLICATE_WINDOW`` after the one that
began the drain, the end of the grace, or a crash loop: kill the children, put their
jobs back) -> exit once every child is reaped and no claim is in flight. A SIGTERM
within the window of the first is the same stop delivered twice (a ``timeout`` wrapper
signals its child and then its process group): it changes nothing.
"""

from __future__ import annotations

import logging
import selectors
import signal
import time

from setproctitle import setproctitle

from shared import jobs
from shared.exitcodes import CLI_JOBS_FAILED
from shared.fdwait import readable
from supervisor.config import RunConfig
from supervisor.engine import Engine, make_owner
from supervisor.observe import (
    BurstProgress,
    Failures,
    JobTracer,
    MetricsServer,
    SupervisorMetrics,
    Waits,
    run_summary,
    wants_tracing,
)
from supervisor.pool import ForkWaves, NativeJob, Pool, PoolHalted, RunTimes
from supervisor.schedules import ScheduleSpec
from supervisor.signals import (
    DUPLICATE_WINDOW,
    SIGINT_DUPLICATE_WINDOW,
    Received,
    SignalInbox,
)
from workers import tracing as child_tracing

log = logging.getLogger("supervisor.arbiter")

RUNNING, DRAINING, STOPPING = "running", "draining", "stopping"
# A burst's progress line reads what waits and what its discards cancelled from the
# table at most this often.
PROGRESS_READ_INTERVAL = 2.0
# The progress line's counts hold the loop while the database counts the jobs in flight:
# a backlog of millions takes it tens of milliseconds, every half second on a terminal.
# The next count then waits until the counts take at most this share of the loop's time.
PROGRESS_COUNT_SHARE = 0.05
HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP,
                   signal.SIGTTIN, signal.SIGTTOU, signal.SIGCHLD)
MAX_WAIT = 1.0  # the loop wakes at least this often, whatever else is due
STOP_TIMEOUT = 10.0  # after the last kill, how long to wait for children to be reaped
TITLE_INTERVAL = 0.5
REAP_NET = 0.5  # seconds between looks for exited children that no SIGCHLD reported
# What woke the loop, by the kind of thing whose fd was ready (for the wake-up metric).
_WAKE_REASONS = {"Pool": "child", "Database": "notify", "NonBlockingQuery": "claim",
                 "SignalInbox": "signal", "MetricsServer": "scrape"}


def native_title(native: list[NativeJob]) -> str:
    """The title's note on children busy in native code (empty when none)."""
    if not native:
        return ""
    jobs = ",".join(str(n.job_id) for n in native[:3]) + ("..." if len(native) > 3 else "")
    return f" [{len(native)} busy in native code: job {jobs}]"


class Arbiter:
    """Signals, the drain state machine, the pool's life and the loop's turn."""

    def __init__(self, config: RunConfig, dsn: str, queues: list[str], kinds: list[str],
                 *, app_modules: list[str] | None = None, progress: BurstProgress | None = None,
                 schedules: list[ScheduleSpec] | None = None, clock=time.monotonic,
                 engine: Engine | None = None, pool: Pool | None = None,
                 check_schema: bool = False, discards_ok: bool = False) -> None:
        """``engine`` and ``pool``: built from ``config`` unless given (the state
        machine's tests give fakes). ``check_schema``: ``run`` raises ``SchemaMissing``
        unless the database's schema is this code's (checked as it connects).
        ``discards_ok``: a burst exits 0 even when jobs it ran were discarded or their
        dependents cancelled (else ``CLI_JOBS_FAILED``)."""
        self.config = config
        self.discards_ok = discards_ok
        self.started = clock()
        self.check_schema = check_schema
        self.queues = queues
        self.app_modules = app_modules or []
        self.clock = clock
        self.owner = make_owner()
        self.selector = selectors.DefaultSelector()
        self.metrics = SupervisorMetrics(self.owner, max_kinds=config.metrics_max_kinds)
        # A batch run (--burst) fires no periodic jobs: it ends when its work is done.
        fires = None
        if schedules and not config.burst:
            from supervisor.schedules import Schedules  # loaded only where schedules fire

            fires = Schedules(schedules, self.owner, clock=clock)
        # Decided before any fork: the children inherit it (raises TracingUnavailable).
        self.tracer = JobTracer() if wants_tracing(config.otel) else None
        if self.tracer is not None:
            child_tracing.enable()
            log.info("OpenTelemetry tracing on: claim, settle and per-job process spans")
        # One estimate of how long jobs run: the pool feeds it, the engine reads it.
        run_times = RunTimes(config.tuning)
        self.engine = engine if engine is not None else Engine(
            config, dsn, self.owner, queues, kinds, self.metrics, self.selector, clock=clock,
            schedules=fires, tracer=self.tracer, run_times=run_times)
        self.pool = pool if pool is not None else Pool(config.pool_settings(), self.selector,
                                                       clock=clock, run_times=run_times,
                                                       tuning=config.tuning)
        self.metrics_server: MetricsServer | None = None
        self.progress = progress
        self._progress_read_at: float | None = None  # when the table was last read for it
        self._waits: Waits | None = None
        self._cancelled = 0  # dependents cancelled by this run's discards, as last read
        self.failures: Failures | None = None  # what the run did not complete, at its end
        self.inbox = SignalInbox(HANDLED_SIGNALS)
        self.state = RUNNING
        self.exit_code = 0
        self.halt_reason: str | None = None
        self.drain_deadline: float | None = None
        self.stop_deadline: float | None = None
        # The stop signal that began the drain and when it arrived (None: no signal yet).
        self.stop_signal: Received | None = None
        self.next_title = self.next_reap = clock()  # both due at the first turn
        self.turn_ended = clock()  # the settle's wait counts from the last turn's end
        self.fork_waves = ForkWaves(self.pool, config.cpus.count)

    # -- life cycle ----------------------------------------------------------------------
    def run(self) -> int:
        """Serve until drained or stopped; returns the process exit code. Raises
        ``DatabaseUnavailable`` if the database cannot be reached at start (and
        ``SchemaMissing``, with ``check_schema``, if its schema is not this code's)."""
        self.inbox.install(self.selector)
        # A stop signal ends any wait for the database at once (the connection is
        # abandoned, the outage path takes over), so it is acted on whatever the
        # database does.
        self.engine.watch_signals(self.inbox.wakeup_fd)
        # The children boot while the parent connects (start-up is on the clock of every
        # batch run), and they inherit no database socket: the first wave of them, the
        # others once the first job is placed (``supervisor.pool.forkwaves``).
        self.fork_waves.start(self.clock())
        opened = False
        try:
            self.engine.open(check_schema=self.check_schema)
            opened = True
            # Said once connected, as before the children were forked first: scripts
            # that wait for this line may count on the database connections.
            log.info("supervisor %s starting %d children (%s) for queues %s", self.owner,
                     self.config.children, self.config.children_origin(),
                     ",".join(self.queues))
            if self.config.metrics_port is not None:
                self.metrics_server = MetricsServer(
                    self.config.metrics_port, self.metrics.render, self.selector,
                    self.config.metrics_host)
                log.info("metrics on http://%s:%d/metrics", self.metrics_server.host,
                         self.metrics_server.port)
            while not self._finished():
                self.turn()
            self.failures = self._run_failures()
        finally:
            if opened:
                self.engine.close(self.pool, self.clock())
            self.pool.kill_all()
            if self.metrics_server is not None:
                self.metrics_server.close()
            self.inbox.uninstall()
            if self.progress is not None:
                self.progress.close(self.engine.ledger.finished)
        failures = self.failures or self._known_failures()
        log.info("supervisor %s stopped (%s)", self.owner,
                 run_summary(self.engine.ledger.finished, failures, self.metrics.rescued_jobs))
        if (self.config.burst and failures.jobs and self.exit_code == 0
                and not self.discards_ok):
            log.warning("burst: %d of the jobs it ran did not complete (discarded, or "
                        "cancelled because a dependency failed): exit code %d "
                        "(--discards-ok exits 0)", failures.jobs, CLI_JOBS_FAILED)
            self.exit_code = CLI_JOBS_FAILED
        return self.exit_code

    def _known_failures(self) -> Failures:
        """What this process knows it did not complete, without the table."""
        return Failures(dict(self.engine.reporter.discard_reasons), self._cancelled)

    def _run_failures(self) -> Failures | None:
        """A burst's failures as the table has them, once every outcome is written
        (None: not a burst, or the database did not answer)."""
        if not self.config.burst:
            return None
        now = self.clock()
        self.engine.collect(self.pool, now)
        self.engine.flush(now)
        window = now - self.started + 5.0  # the run's length, and a margin for the clocks
        found = self.engine.run_failures(window)
        return None if found is None else Failures(found.discarded, found.cancelled)

    def turn(self) -> None:
        """One pass of the loop: wait, then do everything that is due."""
        self._settle()
        events = self.selector.select(self._timeout())
        woke = self.metrics.woke
        if not events:
            woke("timer")
        for key, mask in events:
            key.data.handle_event(key, mask)
            woke(_WAKE_REASONS.get(type(key.data).__name__, "other"))
        self._handle_signals()
        now = self.clock()
        try:
            # SIGCHLD reaps at once (``handle_chld``); this look is the net for an exit
            # no signal reported: every turn while stopping, else every ``REAP_NET``
            # (a wait4 each turn was 4% of the parent's CPU per 100 ms job, issue 43).
            if self.state != RUNNING or now >= self.next_reap:
                self.next_reap = now + REAP_NET
                self.pool.reap()
            self.pool.tick()
        except PoolHalted as exc:
            self._halt(str(exc))
        self.engine.tick(now, self.pool)
        self.fork_waves.after_tick(now, placed=self.pool.busy_count() > 0,
                                   claiming=self.engine.claim_in_flight,
                                   waiting=self.engine.ledger.has_waiting())
        if self.state == RUNNING and self.engine.burst_finished:
            self.begin_drain()
        self._check_grace(now)
        self._show(now)
        self.turn_ended = self.clock()

    def _finished(self) -> bool:
        if self.state == RUNNING:
            return False
        if self.pool.alive() == 0 and not self.engine.claim_in_flight:
            return True
        # Never wait forever: not for a child that will not be reaped, nor for a claim
        # a hung database never answers (its leases expire and it is rescued).
        deadline = self.stop_deadline
        if deadline is None and self.drain_deadline is not None:
            deadline = self.drain_deadline + STOP_TIMEOUT
        return deadline is not None and self.clock() >= deadline

    def _settle(self) -> None:
        """While every child has jobs queued behind the one it runs, wait a little before
        hearing them (a stop signal ends the wait): their answers gather, and one turn
        serves several. With 5 ms jobs at ``-n 2`` a turn came for nearly every job, and
        the turn's fixed work was most of the parent's CPU per job (issues 43, 48).

        No child runs dry for it: the wait is at most ``settle_share`` of the time until
        the first would (``Pool.quiet_outlook``), and ends before any deadline. It is
        taken only when ``settle_answers`` answers or more are due within it: at 100 ms
        jobs on ``-n 2`` a 20 ms wait usually ended with none, one wake more a turn.
        With a claim out, its answer ends the wait too (``Engine.urgent_fds``). With
        none, the wait may hold back a claim that falls due meanwhile, so the children
        must also keep work for that claim's round trips (``Engine.claim_margin``): at
        ``-n 16`` claims go back to back, and a wait without that margin ran the pipes
        dry."""
        fd = self.inbox.wakeup_fd
        if self.state != RUNNING or fd < 0 or self.inbox.has_pending():
            return
        tuning = self.config.tuning
        outlook = self.pool.quiet_outlook()
        quiet = outlook.seconds
        if quiet <= 0:
            return
        urgent = self.engine.urgent_fds()
        if not urgent:
            quiet -= self.engine.claim_margin()
        wait = min(quiet * tuning.settle_share, tuning.settle_max)
        # The wait is a wake of its own: worth it only for the turns it saves.
        if wait < tuning.settle_min or wait * outlook.answers_per_second < tuning.settle_answers:
            return
        wait = min(wait - (self.clock() - self.turn_ended), self._timeout())
        if wait > 0:
            readable([fd, *urgent], wait)

    def _timeout(self) -> float:
        if self.inbox.has_pending():  # a wait for the database read the wake-up: act now
            return 0.0
        now = self.clock()
        due = min(now + MAX_WAIT, self.engine.next_deadline(now, self.pool))
        server = self.metrics_server
        for t in (self.pool.next_deadline(), self.fork_waves.next_deadline(),
                  self.drain_deadline, self.stop_deadline,
                  server.next_deadline() if server is not None else None,
                  self.progress.next_update if self.progress is not None else None):
            if t is not None and t < due:
                due = t
        return max(0.0, due - now)

    # -- signals -------------------------------------------------------------------------
    def _handle_signals(self) -> None:
        for received in self.inbox.take_received():
            if received.signum in (signal.SIGTERM, signal.SIGINT):
                self.handle_stop(received)
                continue
            name = signal.Signals(received.signum).name[3:].lower()
            getattr(self, f"handle_{name}")()

    def handle_stop(self, received: Received) -> None:
        """SIGTERM or SIGINT. The first drains: stop claiming, let running jobs finish
        within the grace. Then a second Ctrl-C stops at once, and so does a SIGTERM,
        unless it came within ``DUPLICATE_WINDOW`` of the signal that began the drain
        (``SIGINT_DUPLICATE_WINDOW`` for a Ctrl-C): that is the same stop delivered
        twice, one request."""
        name = signal.Signals(received.signum).name
        at = received.at if received.at is not None else self.clock()
        first = self.stop_signal
        if self.state == RUNNING:
            self.stop_signal = Received(received.signum, at)
            log.info("%s: draining (grace %.0f s)", name, self.config.grace)
            self.begin_drain()
            return
        if self.state == STOPPING:
            return
        if first is None:
            # Draining because a burst ran out of work: this is the first stop asked.
            self.stop_signal = Received(received.signum, at)
            log.info("%s: already draining (the burst's work is done); a second stop "
                     "signal stops now", name)
            return
        window = DUPLICATE_WINDOW if received.signum == signal.SIGTERM else \
            SIGINT_DUPLICATE_WINDOW
        if first.at is not None and abs(at - first.at) < window:
            log.info("%s %.0f ms after the first stop signal: the same stop, still "
                     "draining (a SIGTERM %.0f s or more after it, a second Ctrl-C or "
                     "SIGQUIT stops now)", name, abs(at - first.at) * 1000, DUPLICATE_WINDOW)
            return
        self.stop_now(f"second stop signal ({name})")

    def handle_term(self) -> None:
        """SIGTERM, arrived now (see ``handle_stop``)."""
        self.handle_stop(Received(signal.SIGTERM, self.clock()))

    def handle_int(self) -> None:
        """Ctrl-C, arrived now (see ``handle_stop``)."""
        self.handle_stop(Received(signal.SIGINT, self.clock()))

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
        released = self.engine.drain(now)
        if released:
            log.info("released %d claimed jobs that had not started", released)
        self.pool.stop()
        self.engine.notify_drain(self.pool, self.config.grace)

    def stop_now(self, why: str) -> None:
        """Kill every child now; running and waiting jobs go back to available."""
        if self.state == STOPPING:
            return
        log.warning("%s: stopping now, %d running jobs go back", why, self.pool.busy_count())
        now = self.clock()
        self.state = STOPPING
        self.engine.drain(now)
        self.pool.interrupt_all(jobs.FAIL_SHUTDOWN)
        self.pool.kill_all()
        self.stop_deadline = now + STOP_TIMEOUT
        self.engine.collect(self.pool, now)
        self.engine.flush(now)

    def _halt(self, why: str) -> None:
        log.error("halting: %s", why)
        self.exit_code = 1
        self.halt_reason = why
        self.stop_now("crash loop")

    def _check_grace(self, now: float) -> None:
        if (self.state == DRAINING and self.drain_deadline is not None
                and now >= self.drain_deadline and self.pool.busy_count() > 0):
            log.warning("grace of %.0f s is over: killing %d running jobs, they go back",
                        self.config.grace, self.pool.busy_count())
            self.stop_now("end of grace")

    # -- display -------------------------------------------------------------------------
    def _unhealthy(self) -> str | None:
        if not self.engine.database_up:
            return "the database does not answer"
        if self.halt_reason:
            return f"halted: {self.halt_reason}"
        return None

    def _show(self, now: float) -> None:
        if self.metrics_server is not None:
            self.metrics_server.report(now, self._unhealthy())
            self.metrics_server.tick(now)
        if now >= self.next_title:
            self.next_title = now + TITLE_INTERVAL
            pool = self.pool
            self.metrics.children(pool.busy_count(), pool.idle_count())
            self.metrics.database_up(self.engine.database_up)
            setproctitle(f"supervisor: master [{pool.busy_count()}/{pool.size()} busy]"
                         f"{native_title(pool.native_jobs(now))} queues={','.join(self.queues)}")
        progress = self.progress
        if progress is not None and now >= progress.next_update:
            self._read_for_progress(now)
            asked = self.clock()
            counts = self.engine.queue_counts()
            took = self.clock() - asked
            progress.update(now, self.engine.ledger.finished, counts, self._waits,
                            self._known_failures())
            progress.next_update = max(progress.next_update, now + took / PROGRESS_COUNT_SHARE)

    def _read_for_progress(self, now: float) -> None:
        """What waits (for a run_at or for dependencies) and what this run's discards
        cancelled, from the table, at most every ``PROGRESS_READ_INTERVAL``."""
        if self._progress_read_at is not None and \
                now < self._progress_read_at + PROGRESS_READ_INTERVAL:
            return
        self._progress_read_at = now
        found = self.engine.waiting()
        self._waits = None if found is None else Waits(found.timed, found.held,
                                                        found.next_due_in)
        if self.engine.ledger.finished.get("discarded"):
            window = now - self.started + 5.0
            cancelled = self.engine.cancelled_dependents(window)
            if cancelled is not None:
                self._cancelled = cancelled
