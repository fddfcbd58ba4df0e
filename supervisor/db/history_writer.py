"""The per-minute history, written beside the loop and never in its way (issue 29).

The maintenance leader's roll-up and depth sample (``supervisor.db.history``) ran on
the work connection, inside the maintenance round: the loop waited for them, and every
child that finished meanwhile waited for the loop. Timed in a no-op drain of 1.2 million
jobs they held the loop 5.8% of the time (a round that rolled 15 s of its jobs took
0.2-0.4 s; the depth count ran into its 250 ms timeout nearly every round), and the
leader drained 9-18% slower than without them (docs/benchmarks.md). So they run here,
on a connection of their own in libpq's non-blocking mode (``NonBlockingQuery``), as
the claim does: the leader's round only asks for them (``request``), the loop reads
each answer when the socket is readable and sends the next statement: the roll-up
(again with the careful reading of ``usage`` if the plain cast failed), then the depth
sample under its short statement timeout. A sample cancelled at that timeout is not
tried again before the next minute: its minute never got a sample, so every round
counted the backlog again, and that was most of the stall and of the database CPU.
A sample that was written is not sent again before the next minute either: the other
rounds of the minute would only have sent four statements that write nothing.

The connection is opened when first asked for, from the loop's selector without
blocking (``Connecting``): a supervisor that never leads never opens it. Its waits are
bounded as the loop's others are: a connect or a statement that the server has not
answered within the client-side ``deadline`` is abandoned (the connection is closed
without waiting, and opened again at the next round), and ``close`` at exit waits for
nothing, so neither a hung database nor a stop ever waits for the history. Each
statement is one transaction (the roll-up moves its mark with the rows it added, or
neither), so an abandoned one is either whole on the server or not there at all: no job
is counted twice or lost. A round still under way when the next is asked for is left to
finish; the next is skipped (the mark catches up: a round rolls up to three intervals).

Only the leader's round asks, the mark is taken with SKIP LOCKED, and a round's rows
come from the jobs table: nothing here is written per job.

The same round, on the same connection, first moves finished jobs into their archives
and drops the archives past their retention (issue 40, ``supervisor.db.archives``),
when given an ``ArchivePlan``: at a high rate the move is the leader's largest
statement, so it too stays out of the loop.
Then, given a ``Compaction``, now and then it looks at the hot table's size and, when
a held horizon has left it mostly empty, vacuums it and then rewrites it
(``supervisor.db.compaction``).
"""

from __future__ import annotations

import functools
import logging
import selectors
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg

from shared.db import first_line
from supervisor.db import archives, compaction, history
from supervisor.db.archives import ArchivePlan, ArchiveRound
from supervisor.db.compaction import Compaction, HotTableSize, Step
from supervisor.db.connections import (
    Connecting,
    DatabaseHung,
    DeadlineConnection,
    close_quietly,
)
from supervisor.db.database import connection_lost
from supervisor.db.nonblocking import NonBlockingQuery, Prepared
from supervisor.db.throttled_log import ThrottledLog

log = logging.getLogger("supervisor.history")

_ROLL_UP = Prepared(history.ROLL_UP)
_ROLL_UP_GUARDED = Prepared(history.ROLL_UP_GUARDED)
_SAMPLE = Prepared(history.SAMPLE)
# The sample is a transaction of its own whose statement timeout is set LOCAL, so it
# never outlives it (behind a pooler in transaction mode a session's SET would stay
# with a server connection that others use next).
_BEGIN = Prepared("BEGIN")
_SAMPLE_TIMEOUT = Prepared(f"SET LOCAL statement_timeout = {int(history.SAMPLE_TIMEOUT_MS)}")
_COMMIT = Prepared("COMMIT")  # after a cancelled count: rolls back, no error
_ARCHIVE = Prepared(archives.ARCHIVE)
_RETIRE = Prepared(archives.RETIRE)
_HOT_SIZE = Prepared(compaction.SIZE)
_UNBOUND = [Prepared(sql) for sql in compaction.UNBOUND]


@dataclass
class _Step:
    """One statement of a round, and what its answer (rows or error) means."""

    statement: Prepared
    params: dict[str, Any]
    answered: Callable[[list | Exception], None]
    deadline: float | None = None  # seconds for its answer (None: the writer's deadline)


@dataclass
class HistoryRound:
    """What the last finished round did (for the debug log and the tests)."""

    began: float = 0.0  # monotonic, when it was asked for
    rolled: int = 0  # (minute, queue, kind) rows written or added to
    sampled: int = 0  # queues whose depth was recorded
    roll_seconds: float = 0.0  # from the request to the roll-up's answer
    errors: list[str] = field(default_factory=list)


class HistoryWriter:
    """The leader's background round, sent on a connection of its own without blocking
    the loop: the finished jobs' move into archives and their drop, a look at the hot
    table's size (and its rewrite), the roll-up and the depth sample. ``request`` starts
    a round, ``tick`` moves it along (connect,
    deadlines), ``next_deadline`` says when ``tick`` must run again, ``close`` at exit."""

    def __init__(self, dsn: str, name: str, selector: selectors.BaseSelector, *,
                 statement_timeout: float, deadline: float,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time, lag: float = history.LAG,
                 keep: float = history.KEEP, slice_seconds: float = history.SLICE,
                 archive: ArchivePlan | None = None,
                 compaction: Compaction | None = None) -> None:
        """``archive``: the finished jobs' move and drop, run first in each round (None:
        neither); ``compaction``: the hot table's rewrite after a held horizon (None:
        never)."""
        self.dsn = dsn
        self.name = name
        self.selector = selector
        self.statement_timeout = statement_timeout
        self.deadline = deadline
        self.clock = clock
        self.wall = wall
        self.roll_params = history.roll_up_params(lag, keep, slice_seconds)
        self.keep = keep
        self.query: NonBlockingQuery | None = None
        self.connecting: Connecting | None = None
        self.steps: list[_Step] = []
        self.current = HistoryRound()
        self.last: HistoryRound | None = None  # the last round that ended
        self.archive = archive
        self.archived = ArchiveRound()  # what the last round's move and drop did
        self.compaction = compaction
        self.rounds = 0  # rounds ended, whatever became of them
        self.skipped = 0  # rounds asked for while the previous one was under way
        self._sent_at = 0.0
        self._answer_within = deadline  # the statement in flight's deadline, seconds
        self._server_version = 0  # libpq's number, once connected
        # A count cancelled at its timeout is not tried again before the next minute
        # (wall clock, as the samples' minutes): tried every round, it cost the database
        # its whole timeout every 5 s while a backlog of 1.2 million jobs drained.
        self.no_sample_until = 0.0
        # While the MVCC horizon is held, the sample's count walks every entry the hold
        # kept in the indexes of available and running jobs, as the claim cursors' poll
        # from the head does: the maintenance spaces it the same way (``space_samples``).
        self.sample_spacing = 0.0  # seconds from the last sample's minute; 0: each minute
        self._sampled_minute = float("-inf")  # wall clock: the minute of the last sent
        self._errors = ThrottledLog(log, logging.WARNING, clock,
                                    retry="will try again next round")

    @property
    def busy(self) -> bool:
        """A round is under way (connecting, a statement in flight, or steps left)."""
        return bool(self.steps) or self.connecting is not None or (
            self.query is not None and self.query.busy)

    def request(self) -> bool:
        """Start a round: the roll-up, then the depth sample. Returns at once; False
        (and nothing sent) when the previous round is still under way."""
        if self.busy:
            self.skipped += 1
            return False
        now = self.clock()
        self.current = HistoryRound(began=now)
        self.steps = []
        if self.archive is not None and self.archive.active:
            self.archived = ArchiveRound()
            self.steps += [_Step(_ARCHIVE, self.archive.archive_params(), self._archived),
                           _Step(_RETIRE, self.archive.retire_params(), self._retired)]
        if self.compaction is not None and self.compaction.due(now):
            self.steps.append(_Step(_HOT_SIZE, {}, self._sized))
        self.steps.append(_Step(_ROLL_UP, self.roll_params, self._rolled))
        wall = self.wall()
        if wall >= self.no_sample_until and wall >= self._sampled_minute + self.sample_spacing:
            self._sampled_minute = wall // 60 * 60
            self.steps += [_Step(_BEGIN, {}, self._ignored),
                           _Step(_SAMPLE_TIMEOUT, {}, self._ignored),
                           _Step(_SAMPLE, {"keep": self.keep}, self._sampled),
                           _Step(_COMMIT, {}, self._ignored)]
        self._advance(now)
        return True

    def horizon_held(self, seconds: float) -> None:
        """The MVCC horizon's holder was looked at: held ``seconds`` (0: not held). No
        rewrite of the hot table while it is held."""
        if self.compaction is not None:
            self.compaction.horizon_held(seconds)

    def space_samples(self, seconds: float) -> None:
        """At least ``seconds`` from the minute of one depth sample to the next (0 or
        60: a sample each minute). Under a held MVCC horizon each sample walks every
        entry the hold kept: one a minute through a 10-minute hold at 1,000 jobs/s, and
        the claim index was read 6.0 entries per job claimed, against 1.1 before the
        hold (docs/reliability.md). The dashboard's depth chart has gaps instead."""
        self.sample_spacing = seconds

    def tick(self, now: float) -> None:
        """Adopt a connection that finished opening, give up on one that did not open or
        a statement not answered within the deadline."""
        connecting = self.connecting
        if connecting is not None:
            if connecting.error is not None:
                self._give_up(connecting.error)
            elif connecting.conn is not None:
                self.connecting = None
                self._adopt(connecting.conn)
                self._advance(now)
            elif now >= connecting.deadline_at:
                self._give_up(DatabaseHung(f"connecting took longer than {self.deadline:g} s "
                                           "(client-side deadline)"))
            return
        query = self.query
        if query is not None and query.busy and now >= self._sent_at + self._answer_within:
            self._give_up(DatabaseHung(f"a statement got no answer within "
                                       f"{self._answer_within:g} s (client-side deadline)"))

    def next_deadline(self) -> float | None:
        """When ``tick`` must run at the latest (None: nothing is waited for)."""
        if self.connecting is not None:
            return self.connecting.deadline_at
        if self.query is not None and self.query.busy:
            return self._sent_at + self._answer_within
        return None

    def close(self) -> None:
        """Drop the round under way and the connection, waiting for nothing (at exit)."""
        self.steps.clear()
        if self.connecting is not None:
            self.connecting.abandon()
            self.connecting = None
        query, self.query = self.query, None
        if query is not None:
            query.abandon()
            close_quietly(query.conn)

    # -- the round's steps --------------------------------------------------------------
    def _advance(self, now: float) -> None:
        """Send the next step, or open the connection first; end the round when none
        is left."""
        if not self.steps:
            self._ended()
            return
        if self.query is None:
            if self.connecting is None:
                self.connecting = Connecting(self.dsn, self.name, self.statement_timeout,
                                             self.deadline, self.selector, None,
                                             now + self.deadline)
                if self.connecting.done:  # failed at once, or (never) opened at once
                    self.tick(now)
            return
        step = self.steps.pop(0)
        self._sent_at = now
        self._answer_within = step.deadline if step.deadline is not None else self.deadline
        try:
            self.query.send(step.statement, step.params,
                            lambda outcome: self._answer(step, outcome))
        except psycopg.Error as exc:
            self._give_up(exc)

    def _answer(self, step: _Step, outcome: list | Exception) -> None:
        """A statement answered (called from the loop's ``handle_event``)."""
        if isinstance(outcome, Exception) and connection_lost(outcome):
            self._give_up(outcome)
            return
        step.answered(outcome)
        self._advance(self.clock())

    def _archived(self, outcome: list | Exception) -> None:
        plan = self.archive
        assert plan is not None
        seconds = self.clock() - self._sent_at
        if isinstance(outcome, psycopg.errors.QueryCanceled):
            plan.cancelled()
            self._failed("moving finished jobs into their archives", outcome)
            return
        if isinstance(outcome, Exception):
            self._failed("moving finished jobs into their archives", outcome)
            return
        moved = {str(family): int(count) for family, count, _ in outcome}
        self.archived.moved = moved
        self.archived.seconds = seconds
        plan.answered(moved, seconds)

    def _retired(self, outcome: list | Exception) -> None:
        if isinstance(outcome, Exception):
            self._failed("dropping archives past their retention", outcome)
            return
        if outcome:
            self.archived.dropped, self.archived.left_busy = (int(v) for v in outcome[0])
            if self.archived.dropped:
                log.info("dropped %d archives of finished jobs past their retention",
                         self.archived.dropped)

    def _sized(self, outcome: list | Exception) -> None:
        plan = self.compaction
        assert plan is not None
        if isinstance(outcome, Exception):
            self._failed("looking at the size of supervisor.jobs", outcome)
            return
        heap, indexes, live, autovacuum = outcome[0]
        step = plan.looked(self.clock(), HotTableSize(int(heap), int(indexes), int(live),
                                                      bool(autovacuum)))
        if step is None:
            return
        answered = functools.partial(self._compacted, step)
        # the server's own timeout answers first; the client's deadline is the backstop
        within = max(self.deadline, step.timeout_ms / 1000 + 1.0)
        self.steps[:0] = ([_Step(Prepared(s), {}, self._ignored_setting)
                           for s in step.bounds()]
                          + [_Step(Prepared(step.statement(self._server_version)), {},
                                   answered, within)]
                          + [_Step(s, {}, self._ignored_setting) for s in _UNBOUND])

    def _compacted(self, step: Step, outcome: list | Exception) -> None:
        plan = self.compaction
        assert plan is not None
        done = plan.vacuumed if step is Step.VACUUM else plan.rewritten
        done(self.clock() - self._sent_at,
             f"{type(outcome).__name__}: {first_line(outcome)}"
             if isinstance(outcome, Exception) else None)

    def _ignored_setting(self, outcome: list | Exception) -> None:
        if isinstance(outcome, Exception):
            self._failed("bounding the vacuum or rewrite of supervisor.jobs", outcome)

    def _rolled(self, outcome: list | Exception) -> None:
        if isinstance(outcome, psycopg.errors.DataError):
            # A usage figure that is not a number: the careful reading, at once.
            self.steps.insert(0, _Step(_ROLL_UP_GUARDED, self.roll_params,
                                       self._rolled_carefully))
            return
        self._rolled_carefully(outcome)

    def _rolled_carefully(self, outcome: list | Exception) -> None:
        self.current.roll_seconds = self.clock() - self.current.began
        if isinstance(outcome, Exception):
            self._failed("rolling up the job history", outcome)
        elif outcome:
            self.current.rolled = int(outcome[0][0])

    def _sampled(self, outcome: list | Exception) -> None:
        if isinstance(outcome, psycopg.errors.QueryCanceled):
            # Too big a backlog to count in time: no sample this minute.
            self.no_sample_until = (self.wall() // 60 + 1) * 60
            return
        if isinstance(outcome, Exception):
            self._failed("sampling queue depth", outcome)
            return
        # This minute has its sample now: until the next, SAMPLE would add nothing.
        self.no_sample_until = (self.wall() // 60 + 1) * 60
        if outcome:
            self.current.sampled = int(outcome[0][0])

    def _ignored(self, outcome: list | Exception) -> None:
        if isinstance(outcome, Exception):
            self._failed("sampling queue depth", outcome)

    def _ended(self) -> None:
        self.rounds += 1
        self.last = self.current
        log.debug("history round: %d rows rolled up in %.0f ms, %d queues sampled, %.0f ms "
                  "in all", self.current.rolled, self.current.roll_seconds * 1000,
                  self.current.sampled, (self.clock() - self.current.began) * 1000)

    # -- failures -----------------------------------------------------------------------
    def _adopt(self, conn: DeadlineConnection) -> None:
        self._server_version = conn.info.server_version
        self.query = NonBlockingQuery(conn, self.selector, clock=self.clock)
        self.query.prepares = False  # a statement every few seconds: planning is cheap

    def _give_up(self, exc: BaseException) -> None:
        """The connection is gone or hung: close it, drop the round (the next round
        connects again)."""
        self._failed("writing the job history", exc)
        self.close()
        self._ended()

    def _failed(self, what: str, exc: BaseException) -> None:
        self.current.errors.append(f"{type(exc).__name__}: {first_line(exc)}")
        self._errors.failed(what, exc)
