"""Polling and pauses: how the engine learns what the queues hold and what is stopped.

A poll promotes due scheduled and retrying jobs, asks which queues hold work (the
claim's cursors and the planner's demand learn it) and when the next job for later is
due: the loop wakes then, not at its next poll. Polls come at a fixed interval with
jitter, and sooner when an event asks (a NOTIFY of scheduled jobs, retries written),
but never closer than ``MIN_POLL_GAP``. Paused kinds (the breaker's or an operator's)
and paused queues are read here too: claims leave them out, and what is held here
unstarted goes back. Kind pauses are read at a poll only when they may have changed: a
NOTIFY said so (schema 0031's trigger), a timed pause ran out, the connection came back,
or ``SETTINGS_FALLBACK`` passed; without LISTEN, at every poll.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

from shared.defaults import SETTINGS_FALLBACK
from supervisor.engine.notices import notify_pause

if TYPE_CHECKING:
    from supervisor.breaker import Breaker
    from supervisor.config import RunConfig
    from supervisor.db import Database
    from supervisor.engine.claims import Claimer
    from supervisor.engine.ledger import Ledger
    from supervisor.engine.outbox import Outbox
    from supervisor.engine.planner import Scheduler
    from supervisor.pool import Pool

log = logging.getLogger("supervisor.engine")

PROMOTE_AGAIN = 0.005  # a job found due during a poll is promoted this soon after
MIN_POLL_GAP = 0.05  # polls asked for by events (NOTIFY, retries) come no closer than this
# The poll interval is drawn from this range of its setting: supervisors started
# together do not poll together. A fixed interval, no backoff: backoff costs throughput.
POLL_JITTER_LOW = 0.8
POLL_JITTER_HIGH = 1.2


class Poller:
    """When to poll, the poll itself, and the pauses of kinds and queues."""

    def __init__(self, config: RunConfig, db: Database, queues: list[str], kinds: list[str],
                 claimer: Claimer, planner: Scheduler, ledger: Ledger, outbox: Outbox,
                 breaker: Breaker, now: float,
                 refresh_limits: Callable[[float, Pool], None]) -> None:
        self.config = config
        self.db = db
        self.queues = queues
        self.kinds = kinds  # the kinds served here; the claimer's leave out paused ones
        self.claimer = claimer
        self.planner = planner
        self.ledger = ledger
        self.outbox = outbox
        self.breaker = breaker
        self.refresh_limits = refresh_limits  # reads and renews the global-limit slices
        self.claim_before_poll = True  # the start's claim: see first_claim
        self.next_poll = now
        self.last_poll = now - MIN_POLL_GAP
        self.next_promote: float | None = None  # when the next scheduled/retrying job is due
        # When the kind pauses are read again at the latest (a poll reads them then), if
        # no notice says sooner; None: at the next poll.
        self.next_kind_read: float | None = None

    def tick(self, now: float, pool: Pool) -> None:
        """Poll if the interval ran out or a job for later came due (at start, after
        the first claim)."""
        if self.claim_before_poll:
            self.claim_before_poll = False
            self.first_claim(now, pool)
        if now >= self.next_poll:
            jitter = random.uniform(POLL_JITTER_LOW, POLL_JITTER_HIGH)
            self.next_poll = now + self.config.poll_interval * jitter
            self.poll(now, pool)
        elif self.next_promote is not None and now >= self.next_promote:
            self.poll(now, pool)

    def first_claim(self, now: float, pool: Pool) -> None:
        """At start the first claim goes out before the first poll, which then runs while
        the database executes it: the idle children wait for the claim's answer, not for
        the poll's four statements too (issue 31: 2-5 ms of every start). What the claim
        must know is read first: paused kinds and the global limits. Every served queue
        is assumed to hold work; the claim of one that holds none comes back short, and
        the poll's answer sets the rest right."""
        self.read_kind_pauses(now)
        if self.planner.limits.due(now):
            self.refresh_limits(now, pool)
        if not self.db.up:
            return
        self.planner.wake(self.queues)
        self.claimer.claim(now, pool.size())

    def deadlines(self) -> list[float]:
        """When a poll is due at the latest."""
        due = [self.next_poll]
        if self.next_promote is not None:
            due.append(self.next_promote)
        return due

    def soon(self, now: float) -> None:
        """Poll as soon as the gap between polls allows (an event said something changed)."""
        self.next_poll = min(self.next_poll, max(now, self.last_poll + MIN_POLL_GAP))

    def right_away(self, now: float) -> None:
        """Poll at the next tick, whatever the gap (the queues were not watched), and
        read the kind pauses with it (their notices were not heard either)."""
        self.next_poll = now
        self.next_kind_read = None

    def kind_pauses_changed(self) -> None:
        """A NOTIFY said a kind was paused or resumed: the next poll reads the pauses."""
        self.next_kind_read = None

    def poll(self, now: float, pool: Pool) -> None:
        """Promote due scheduled/retryable jobs, ask which queues hold work and when the
        next job for later is due (the loop wakes then, not at its next poll)."""
        if self.next_kind_read is None or now >= self.next_kind_read or not self.db.listen:
            self.read_kind_pauses(now)
        db, queues, kinds = self.db, self.queues, self.claimer.kinds
        self.last_poll = now
        db.call(lambda s: s.promote_due(), 0, "promoting due jobs")
        cursors, planner = self.claimer.cursors, self.planner
        starts = cursors.poll_starts(now, db.listen)
        # A fair queue's poll reads its waiting jobs from the head of the claim index (its
        # members may wait behind its cursor): under a held horizon that walks every entry
        # claimed since the hold began, once a second. While its claims come back full it
        # surely has work, and what is made available behind is told by NOTIFY; the poll
        # from the head, once a minute, still reads it (issue 40).
        known = set() if cursors.head_poll else {
            queue for queue in queues if planner.fair(queue) and planner.known_busy(queue)}
        read = [queue for queue in queues if queue not in known]
        with_work = db.call(lambda s: s.queues_with_work(read, kinds, starts), None,
                            "polling for work")
        if with_work is not None:
            cursors.observed(with_work, polled=True)
            planner.observed(set(with_work) | known | db.take_notified())
        due_in = db.call(lambda s: s.seconds_until_due(queues, kinds), None, "polling for work")
        # Due already (it came due while this poll ran): promote it a moment from now.
        self.next_promote = None if due_in is None else now + max(due_in, PROMOTE_AGAIN)
        if self.ledger.has_waiting() or pool.busy_count():
            # Catches a pause whose NOTIFY was missed (say, while reconnecting), a job of
            # a queue paused with --stop-running that started all the same (its child
            # took it before the pause's SKIP came), and, with no LISTEN (behind a
            # pooler), is how --stop-running reaches this supervisor at all. One indexed
            # read a poll, only while jobs are held here.
            self.paused(db.call(lambda s: s.queue_pauses(queues), {}, "polling"), now, pool)

    def read_kind_pauses(self, now: float) -> None:
        """Learn which kinds are paused (breaker or by hand): claims leave them out, and
        claimed jobs of theirs not started yet go back."""
        changed = self.db.call(self.breaker.refresh, None, "reading paused kinds")
        if changed is not None:
            expiry = self.breaker.first_expiry
            self.next_kind_read = now + (SETTINGS_FALLBACK if expiry is None
                                         else min(SETTINGS_FALLBACK, max(expiry, 0.0)))
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

    def notified_pauses(self, names: Collection[str], now: float, pool: Pool) -> None:
        """Read the rows a pause NOTIFY named: whether their running jobs stop too (the
        database away: paused all the same, a later poll reads the flag)."""
        if not names:
            return
        pauses = self.db.call(lambda s: s.queue_pauses(sorted(names)), None,
                              "reading paused queues")
        self.paused(dict.fromkeys(names, False) if pauses is None else pauses, now, pool)

    def paused(self, pauses: dict[str, bool], now: float, pool: Pool) -> None:
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
