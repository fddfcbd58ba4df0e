"""Draining: the engine's side of a graceful stop.

A drain claims nothing more and gives back the claimed jobs that have not started
(their attempt not counted). The running jobs that cannot finish within the grace are
told to checkpoint and stop (``engine.notices``), at the drain's start and each tick
after for those that started late or overran their estimate. A stop signal ends any
wait for the database (``watch_signals``), and once draining so does a child's exit.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import TYPE_CHECKING

from supervisor.db import Database, Interrupt, kind_run_p95
from supervisor.engine.notices import notify_drain

if TYPE_CHECKING:
    from supervisor.engine.claims import Claimer
    from supervisor.engine.ledger import Ledger
    from supervisor.engine.outbox import Outbox
    from supervisor.engine.reporting import OutcomeReporter
    from supervisor.pool import Pool, RunTimes


class Drain:
    """Stops claiming, gives back what has not started, tells running jobs to stop."""

    def __init__(self, db: Database, claimer: Claimer, reporter: OutcomeReporter,
                 ledger: Ledger, outbox: Outbox, run_times: RunTimes, min_samples: int,
                 clock, flush: Callable[[float], None]) -> None:
        self.db = db
        self.claimer = claimer
        self.reporter = reporter
        self.ledger = ledger
        self.outbox = outbox
        self.run_times = run_times
        self.min_samples = min_samples  # a kind's p95 read from the table needs this many
        self.clock = clock
        self.flush = flush  # the engine's write of the outbox
        self.ends: float | None = None  # draining: when the grace ends

    def watch_signals(self, wakeup_fd: int) -> None:
        """Let the signal wakeup pipe end any wait for the database: a stop signal is then
        acted on whatever the database does (the connection is abandoned and the outage
        path takes over)."""
        self.db.interrupt = Interrupt(wakeup_fd)

    def begin(self, now: float) -> int:
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

    def notify(self, pool: Pool, grace: float) -> int:
        """At a drain's start: tell the running jobs that cannot finish within the
        grace to checkpoint and stop. Returns how many were told now."""
        self.ends = self.clock() + grace
        run_times = self.run_times
        unknown = run_times.unknown({job.kind for job, _ in pool.running_since()})
        if unknown:  # none completed here yet: the table's run times say (issue 47)
            fewest = self.min_samples
            run_times.adopt(self.db.call(
                lambda s: kind_run_p95(s.connection, sorted(unknown), fewest), {},
                "reading run times"))
        return notify_drain(pool, run_times, grace)

    def tick(self, now: float, pool: Pool) -> None:
        """While the grace runs: tell the jobs that started late or overran their
        estimate."""
        if self.ends is not None and pool.busy_count():
            notify_drain(pool, self.run_times, max(0.0, self.ends - now))
