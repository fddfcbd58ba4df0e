"""The outbox: the one owner of every outcome not yet written to the database. Its
numbers (``write_batch``, ``carry_limit``, ``claim_carry_wait``, ``start_hold``,
``start_carry_age``, ``write_retry_after``) are fields of the tuning table
(``supervisor.tuning``).

Completions, failures, releases (claimed, never started, or stopped after a notice),
interrupts (cut off at the end of the drain), progress reports and checkpoints wait
here; the outbox decides when they must be written and writes them, one fenced
statement per kind. Completions usually ride on the next claim instead
(``take_completions``); a claim that fails hands them back, and a claim refused for
its data (a result PostgreSQL will not store) marks them to be written on their own,
where the bad one is found job by job and becomes that job's failure. When no claim is
due, completions (and starts) with nothing else waiting go on the claim connection all
the same, in a claim of no job (``Claimer.carry``): the loop never waits for the write
every short job needs. While a claim is in flight they wait for it, however many
(``carry_limit`` bounds the wait, not ``write_batch``): a blocking write of 500 of them
took 100-500 ms on a busy server, and 64 children ran dry behind it (issue 48).

Completions wait at most ``claim_carry_wait`` for a claim not sent yet that is sure to
come (the queue has work, children are busy: it goes out once half its window is free).
Without the wait every completion 20 ms old forced a claim for the one or two free
places, one claim and commit per job or two for 20 ms jobs; with it a claim takes half a
window and carries as many completions (issue 31).

Starts are held back (``start_hold``): a job that ends within it never has its start
written at all, since its completion or failure carries it (``ran``: the attempt's
start is set from it). So a short job's row is written twice per attempt (claim,
outcome) instead of three times. A start older than ``start_carry_age`` rides on the
next claim; one that reaches ``start_hold`` is written on its own. The price is a
window: a supervisor that dies within ``start_hold`` of a start leaves a job that rescue
gives back without charging its attempt, as if it had never started.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from shared import jobs
from shared.jobs import ClaimedJob
from shared.usage import Usage, ran_at_least
from supervisor.db import (
    Apart,
    Attempt,
    Completion,
    Database,
    Failure,
    FailuresWritten,
    Renewal,
    Snooze,
    Store,
    write_apart,
)
from supervisor.db import refusal_reason as reason
from supervisor.observe import JobTracer, SupervisorMetrics
from supervisor.tuning import DEFAULT, Tuning

log = logging.getLogger("supervisor.outbox")

TEXT_LIMIT = jobs.OUTPUT_LIMIT  # printed output (and by default any text) is cut to this


# A failed attempt whose entry PostgreSQL refused is written again with this much of its
# message (the start) and traceback (the end), and neither its usage nor its output.
REDUCED_MESSAGE = 1024
REDUCED_TRACEBACK = 4096


def reduced(failure: Failure, exc: BaseException) -> Failure:
    """``failure`` cut down to a form the database takes, with a note saying why."""
    message = failure.message
    if len(message) > REDUCED_MESSAGE:
        message = message[:REDUCED_MESSAGE] + f" [... {len(failure.message)} characters]"
    traceback = failure.traceback
    if traceback is not None and len(traceback) > REDUCED_TRACEBACK:
        traceback = "[...] " + traceback[-REDUCED_TRACEBACK:]
    note = f"\n[cut: the database refused the full entry: {reason(exc)}]"
    return Failure(failure.id, failure.attempt, failure.kind, message + note, traceback,
                   failure.retry_delay, failure.terminal, None, None, failure.ran,
                   failure.job_kind)


def _started(store: Store, items: Sequence[Attempt]) -> list[int]:
    store.started(items)
    return []  # a start is not fenced: a job whose lease moved on is simply not touched


_CUT = "\n... [truncated] ...\n"


def clean_text(value: str | None, limit: int = TEXT_LIMIT) -> str | None:
    """Make an error message or traceback storable: no NUL bytes (PostgreSQL refuses
    them in text), bounded length."""
    if value is None:
        return None
    if "\x00" in value:
        value = value.replace("\x00", "\\x00")
    if len(value) > limit:  # the start and the end kept, and at most limit in all
        half = (limit - len(_CUT)) // 2
        value = value[:half] + _CUT + value[-half:]
    return value


class PendingStart(NamedTuple):
    """A start not yet written: the attempt that started, and when (loop clock)."""

    attempt: int
    at: float


@dataclass
class PendingWrites:
    """Outcomes not yet written, grouped by the statement that will write them."""

    completions: list[Completion] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    interrupts: list[Failure] = field(default_factory=list)
    snoozes: list[Failure] = field(default_factory=list)  # workers.Snooze: not failures
    releases: list[ClaimedJob] = field(default_factory=list)
    expirations: list[ClaimedJob] = field(default_factory=list)  # never started
    progress: dict[int, tuple[int, dict]] = field(default_factory=dict)
    starts: dict[int, PendingStart] = field(default_factory=dict)  # by job id
    # job id -> (attempt, state as JSON text): the latest checkpoint of a running job.
    checkpoints: dict[int, tuple[int, str]] = field(default_factory=dict)
    flushed: set[int] = field(default_factory=set)  # checkpoints a handler waits on

    def count(self) -> int:
        """Outcomes waiting (progress reports excluded: they never force a write)."""
        return (len(self.completions) + len(self.failures) + len(self.interrupts)
                + len(self.snoozes) + len(self.releases) + len(self.flushed)
                + len(self.expirations))


class Outbox:
    """Pending outcomes, when they are due, and the statements that write them."""

    def __init__(self, metrics: SupervisorMetrics, flush_interval: float,
                 tracer: JobTracer | None = None, tuning: Tuning = DEFAULT) -> None:
        self.metrics = metrics
        self.tuning = tuning
        self.tracer = tracer  # None unless the otel extra is on
        self.flush_interval = flush_interval
        self.pending = PendingWrites()
        self.since: float | None = None  # when the oldest unwritten outcome arrived
        self._solo = False  # completions must be written alone (one was refused)
        self.retries_written = 0  # failed attempts written that may be retried later
        self.starts_since: float | None = None  # when the oldest unwritten start came
        # The soonest start_hold of a start carried only by a pending completion: the
        # wait for a coming claim ends there, so a start stays unwritten no longer
        # than start_hold (+ flush_interval), as when the completion is written at once.
        self.carried_start_due: float | None = None
        # Flushed checkpoints written (True) or fenced off (False), for their handlers.
        self.acks: list[tuple[int, bool]] = []
        # What each write of failed attempts decided (poison is the row's verdict), for
        # the one log line about each attempt (``OutcomeReporter.settle_failures``).
        self.failures_written: list[FailuresWritten] = []

    # -- recording ----------------------------------------------------------------------
    def started(self, job: ClaimedJob, now: float) -> None:
        """A child took the job: its attempt counts from now. Written by its outcome if
        that comes within ``start_hold``, else by a claim or on its own."""
        self.pending.starts[job.id] = PendingStart(job.attempt, now)
        if self.starts_since is None:
            self.starts_since = now

    def completed(self, job: ClaimedJob, result_json: str | None, now: float,
                  usage: Usage | None = None, output: str | None = None) -> None:
        """The handler returned: the job completes with its result, and what the
        attempt cost and printed."""
        self.pending.progress.pop(job.id, None)
        if job.id not in self.pending.flushed:
            # A completed job resumes from nothing: its last checkpoint, unwritten, would
            # ride a later renewal, which the completion (gone with a claim) has fenced
            # off, and a false "fenced off" warning said so (issue 47).
            self.pending.checkpoints.pop(job.id, None)
        ran = self._ran(job.id, now, usage)  # its completion says it ran, and since when
        if ran is not None:
            due = now - ran + self.tuning.start_hold
            if self.carried_start_due is None or due < self.carried_start_due:
                self.carried_start_due = due
        self.pending.completions.append(Completion(
            job.id, job.attempt, result_json, usage, clean_text(output) if output else None,
            ran))
        self._touch(now)

    def failed(self, job: ClaimedJob, kind: str, message: str, traceback: str | None,
               retry_delay: float | None, terminal: bool, now: float,
               usage: Usage | None = None, output: str | None = None) -> None:
        """The attempt failed; a shutdown interruption goes back without counting."""
        self.pending.progress.pop(job.id, None)
        ran = self._ran(job.id, now, usage)
        failure = Failure(job.id, job.attempt, kind,
                          clean_text(message, jobs.MESSAGE_LIMIT) or kind,
                          clean_text(traceback, jobs.TRACEBACK_LIMIT), retry_delay,
                          terminal or kind in jobs.TERMINAL_FAILURES,
                          usage, clean_text(output) if output else None, ran, job.kind)
        if kind == jobs.FAIL_SHUTDOWN:
            self.pending.interrupts.append(failure)
        elif kind == jobs.FAIL_SNOOZE:
            self.pending.snoozes.append(failure)
        else:
            self.pending.failures.append(failure)
        self._touch(now)

    def _ran(self, job_id: int, now: float, usage: Usage | None) -> float | None:
        """How long an attempt whose start is unwritten ran, for the start its outcome
        writes (``attempted_at``), never less than the child measured
        (``shared.usage.ran_at_least``); None: its start was written, or never came."""
        heard = self._drop_start(job_id, now)
        return None if heard is None else ran_at_least(heard, usage)

    def _drop_start(self, job_id: int, now: float) -> float | None:
        """The job's outcome carries its start: returns how long ago it started when its
        start was not written yet (None: written already, or never reported). With no
        start left to write, no start write is due either (a stale due time would have
        the loop spin until a claim)."""
        starts = self.pending.starts
        start = starts.pop(job_id, None)
        if not starts:
            self.starts_since = None
        elif start is not None and start.at == self.starts_since:
            self.starts_since = min(s.at for s in starts.values())
        return None if start is None else max(0.0, now - start.at)

    def released(self, claimed: list[ClaimedJob], now: float) -> None:
        """Claimed jobs that will not start here: available again, attempt uncounted."""
        if claimed:
            self.pending.releases.extend(claimed)
            self._touch(now)

    def checkpointed(self, job: ClaimedJob, state_json: str, flush: bool, now: float) -> None:
        """A running job's checkpoint: written with the next lease renewal or write
        (a later one replaces it); ``flush``: written now, and its handler told."""
        self.pending.checkpoints[job.id] = (job.attempt, state_json)
        if flush:
            self.pending.flushed.add(job.id)
            self._touch(now)

    def stopped(self, job: ClaimedJob, now: float) -> None:
        """A job whose handler let ``Stopping`` out after a drain's or fence's notice:
        available again, its attempt not spent, no errors entry; its last checkpoint is
        written first."""
        self._drop_start(job.id, now)
        self.pending.releases.append(job)
        self._touch(now)

    def take_failures_written(self) -> list[FailuresWritten]:
        """What the writes of failed attempts since the last call decided."""
        written, self.failures_written = self.failures_written, []
        return written

    def take_acks(self) -> list[tuple[int, bool]]:
        """Flushed checkpoints written since the last call: (job id, written)."""
        acks, self.acks = self.acks, []
        return acks

    def expired(self, job: ClaimedJob, now: float) -> None:
        """A claimed job that never started and never will: it ends as 'expired'."""
        self.pending.expirations.append(job)
        self._touch(now)

    def progressed(self, job: ClaimedJob, progress: dict) -> None:
        """The latest progress of a running job, written with the next write."""
        self.pending.progress[job.id] = (job.attempt, progress)

    def held_ids(self) -> list[int]:
        """Jobs whose outcome is still to be written (they are running in the table)."""
        p = self.pending
        return ([c.id for c in p.completions] + [f.id for f in p.failures]
                + [f.id for f in p.interrupts] + [f.id for f in p.snoozes]
                + [j.id for j in p.releases] + [j.id for j in p.expirations])

    def count(self) -> int:
        """Outcomes waiting to be written."""
        return self.pending.count()

    # -- timing -------------------------------------------------------------------------
    def next_flush_at(self, claim_in_flight: bool, idle: bool = False,
                      claim_coming: bool = False) -> float | None:
        """When the pending outcomes must be written (None: nothing pending). While a
        claim is in flight, completions alone may wait a little for it to carry them;
        ``claim_coming`` (one will be sent as jobs end), for ``claim_carry_wait``.
        ``idle``: no child runs a job, so no other outcome is coming to share the write;
        the batch is written at once (the last jobs of a burst, a lone job someone waits
        for)."""
        if self.since is None:
            if self.starts_since is not None:
                return self.starts_since + self.tuning.start_hold
            return None
        pending = self.pending
        count = pending.count()
        only_completions = count == len(pending.completions) and not self._solo
        if only_completions and claim_in_flight:  # count() holds the flushed: none here
            return self.since + max(self.flush_interval, self.tuning.carry_limit)
        if (count >= self.tuning.write_batch or (idle and not claim_in_flight)
                or pending.flushed):
            return self.since  # a flushed checkpoint's handler waits for its write
        if only_completions and claim_coming:
            wait_until = self.since + max(self.flush_interval, self.tuning.claim_carry_wait)
            if self.carried_start_due is not None:
                wait_until = min(wait_until, max(self.since + self.flush_interval,
                                                 self.carried_start_due))
            return wait_until
        return self.since + self.flush_interval

    def due(self, now: float, claim_in_flight: bool, idle: bool = False,
            claim_coming: bool = False) -> bool:
        """Whether a write is due now."""
        at = self.next_flush_at(claim_in_flight, idle, claim_coming)
        return at is not None and now >= at

    # -- carrying on a claim ------------------------------------------------------------
    def take_starts(self, now: float, every: bool = False) -> list[Attempt]:
        """The starts a write should carry: those at least ``start_carry_age`` old (every
        one with ``every``). They leave the outbox; younger ones wait for their job's
        outcome to carry them."""
        pending = self.pending.starts
        if not pending:
            return []
        since = self.starts_since
        if every or since is None or now - since >= self.tuning.start_hold:
            self.pending.starts = {}
            self.starts_since = None
            return [Attempt(job_id, start.attempt) for job_id, start in pending.items()]
        oldest = now - self.tuning.start_carry_age
        taken = [Attempt(job_id, s.attempt) for job_id, s in pending.items() if s.at <= oldest]
        if taken:
            kept = {job_id: s for job_id, s in pending.items() if s.at > oldest}
            self.pending.starts = kept
            self.starts_since = min((s.at for s in kept.values()), default=None)
        return taken

    def hand_back_starts(self, starts: Sequence[Attempt], now: float) -> None:
        """A claim carrying ``starts`` failed: they wait for the next write, which
        carries them (their time is taken as old enough to ride on a claim)."""
        at = now - self.tuning.start_carry_age
        for start in starts:
            self.pending.starts.setdefault(start.id, PendingStart(start.attempt, at))
        if starts:
            self.starts_since = min(s.at for s in self.pending.starts.values())

    def carries_alone(self) -> bool:
        """Only completions and starts wait: they can ride a claim that takes no job, on
        the claim connection, instead of a write that holds the loop (``Claimer.carry``).
        Anything else (failures, releases, checkpoints, progress) goes by ``flush``."""
        pending = self.pending
        return (not self._solo and not pending.progress and not pending.checkpoints
                and pending.count() == len(pending.completions)
                and bool(pending.completions or pending.starts))

    def take_completions(self) -> list[Completion]:
        """The completions a claim should carry (none while one must be written alone)."""
        if self._solo or not self.pending.completions:
            return []
        taken, self.pending.completions = self.pending.completions, []
        self.carried_start_due = None
        if not self.pending.count() and not self.pending.progress:
            self.since = None  # nothing left to write: no wake-ups for it meanwhile
        return taken

    def hand_back(self, completions: list[Completion], now: float, *, refused: bool) -> None:
        """A claim carrying ``completions`` failed: they go back in front. ``refused``:
        PostgreSQL refused their data, so they are written alone next, job by job."""
        if not completions:
            return
        self.pending.completions[:0] = completions
        if any(c.ran is not None for c in completions):
            self.carried_start_due = now  # how old their starts are is not kept: soon
        self._solo = self._solo or refused
        self._touch(now)

    # -- writing ------------------------------------------------------------------------
    def flush(self, db: Database, now: float, *, last_chance: bool = False) -> None:
        """Write everything pending; what cannot be written (database down, a statement
        failing) stays for the next try. ``last_chance``: the supervisor is exiting."""
        if not (self.pending.count() or self.pending.progress or self.pending.starts
                or self.pending.checkpoints):
            self.since = self.starts_since = None
            return
        tracer = self.tracer
        if tracer is not None:
            held, began = self.held_ids(), tracer.now()
        fenced = db.call(lambda store: self._write(store, now, last_chance), None,
                         "writing outcomes")
        tries = self.tuning.exit_write_tries if last_chance else 1
        while fenced is None and db.up and self.pending.count() and (tries := tries - 1):
            # At exit there is no next turn: a write that lost a deadlock (to a statement
            # of the connection the drain abandoned, still finishing on the server) goes
            # again at once, rather than leaving its jobs to run twice.
            fenced = db.call(lambda store: self._write(store, now, last_chance), None,
                             "writing outcomes")
        if tracer is not None and held:
            tracer.wrote(held, began, self.held_ids())
        if fenced is None and db.up:
            # A statement error, not an outage: try again in a while, not every turn.
            self.since = now + self.tuning.write_retry_after - self.flush_interval
        elif fenced:
            self.metrics.fenced("write", fenced)
        if last_chance and self.pending.count():
            log.error("%d finished jobs could not be written before exit; their leases will "
                      "expire and they will run again", self.pending.count())

    def _write(self, store: Store, now: float, every_start: bool = False) -> int:
        """Each group leaves the outbox once its statement succeeded, so after an error
        only what was not written is tried again. Starts young enough for their job's
        outcome to carry them stay (all go with ``every_start``). A row PostgreSQL
        refuses holds up nothing: its group is written apart (``write_apart``) and the
        row in a reduced form, so no batch is ever retried for its data. Returns how
        many writes were fenced."""
        pending = self.pending
        fenced = 0
        if pending.progress or pending.checkpoints:
            # First: a checkpoint must land while the lease is still ours, before the
            # release of the same job in this write.
            fenced += self._renew_riders(store)
        if pending.completions:
            fenced += self._complete(store, pending.completions)
            pending.completions = []
            self.carried_start_due = None
            self._solo = False
        if pending.failures:
            fenced += self._fail(store, pending.failures)
            self.retries_written += sum(not f.terminal for f in pending.failures)
            pending.failures = []
        if pending.interrupts:
            fenced += self._interrupt(store, pending.interrupts)
            pending.interrupts = []
        if pending.snoozes:
            fenced += self._apart("snooze", [Snooze(f.id, f.attempt, f.retry_delay)
                                             for f in pending.snoozes], store.snooze)
            pending.snoozes = []
        if pending.releases:
            fenced += self._release(store, pending.releases)
            pending.releases = []
        if pending.expirations:
            fenced += self._apart("expire", [Attempt(j.id, j.attempt) for j in pending.expirations],
                                  store.expire_claimed)
            pending.expirations = []
        starts = self.take_starts(now, every_start)
        if starts:
            try:
                self._apart("start", starts, lambda part: _started(store, part))
            except BaseException:
                self.hand_back_starts(starts, now)
                raise
        self.since = None
        return fenced

    @staticmethod
    def _apart(what: str, items: Sequence, write: Callable[[Sequence], list[int]]) -> int:
        """``write(items)`` with every row PostgreSQL accepts written; a row it refuses
        (a write with no text of its own to cut: a release, a snooze, an expiry, a
        start) is left to its lease and logged. Returns how many were fenced off."""
        return len(Outbox._left_to_lease(what, write_apart(items, write)).fenced)

    @staticmethod
    def _left_to_lease(what: str, apart: Apart) -> Apart:
        """Log each row of ``apart`` that PostgreSQL refused: its job is left for its
        lease to expire. Returns ``apart``."""
        for item, exc in apart.refused:
            job_id = item.id
            log.error("job %d: the database refused its %s write (%s); left for its lease "
                      "to expire", job_id, what, reason(exc))
        return apart

    def _renew_riders(self, store: Store) -> int:
        """Write progress reports and checkpoints (a fenced renewal of their jobs)."""
        pending = self.pending
        attempts = {job_id: attempt for job_id, (attempt, _) in pending.progress.items()}
        attempts.update((job_id, attempt)
                        for job_id, (attempt, _) in pending.checkpoints.items())
        reports = {job_id: report for job_id, (_, report) in pending.progress.items()}
        states = {job_id: state for job_id, (_, state) in pending.checkpoints.items()}
        # One value PostgreSQL will not store must not hold up every write behind it
        # (they come first): the others are written, the bad one's lease is renewed
        # without it, and its progress or checkpoint is dropped.
        apart = write_apart([Renewal(job_id, attempt, reports.get(job_id), states.get(job_id))
                             for job_id, attempt in attempts.items()], store.renew)
        fenced = set(apart.fenced)
        if apart.refused:
            for item, exc in apart.refused:
                log.warning("job %d: its progress or checkpoint could not be stored "
                            "(%s); dropped", item.id, reason(exc))
            bare = write_apart([Renewal(item.id, item.attempt) for item, _ in apart.refused],
                               store.renew)
            fenced.update(bare.fenced)
            fenced.update(item.id for item, _ in bare.refused)
            # Its checkpoint was not written: a handler waiting on it is told so.
            fenced.update(item.id for item, _ in apart.refused if item.id in states)
        self.acks.extend((job_id, job_id not in fenced) for job_id in pending.flushed)
        pending.progress = {}
        pending.checkpoints = {}
        pending.flushed = set()
        return len(fenced & set(states))

    def _release(self, store: Store, claimed: list[ClaimedJob]) -> int:
        apart = self._left_to_lease("release", write_apart(
            [Attempt(job.id, job.attempt) for job in claimed], store.release))
        gone = set(apart.fenced) | {item.id for item, _ in apart.refused}
        for queue, n in Counter(j.queue for j in claimed if j.id not in gone).items():
            self.metrics.released(queue, n)
        return len(apart.fenced)

    def _complete(self, store: Store, completions: list[Completion]) -> int:
        """Write completions; one whose result PostgreSQL will not store discards its
        job with the reason (the others are written all the same)."""
        apart = write_apart(completions, store.complete)
        fenced = len(apart.fenced)
        if apart.refused:
            log.warning("%d results could not be stored; those jobs are discarded",
                        len(apart.refused))
            fenced += self._fail(store, [
                Failure(item.id, item.attempt, jobs.FAIL_RESULT,
                        f"result could not be stored: {reason(exc)}", None, None, True,
                        item.usage, item.output, item.ran)
                for item, exc in apart.refused])
        return fenced

    def _fail(self, store: Store, failures: list[Failure]) -> int:
        """Write failed attempts. One PostgreSQL refuses is written again with its text
        cut (``reduced``); refused even so, its job is discarded with the reason; only
        if that is refused too is it left to its lease (logged). Never a retry of the
        same batch."""
        def write(part: Sequence[Failure]) -> list[int]:
            written = store.write_failures(part)
            self.failures_written.append(written)
            return written.fenced

        apart = write_apart(failures, write)
        fenced = len(apart.fenced)
        if not apart.refused:
            return fenced
        for failure, exc in apart.refused:
            log.warning("job %d attempt %d: the database refused its failure (%s); "
                        "written with its error text cut", failure.id, failure.attempt,
                        reason(exc))
        second = write_apart([reduced(f, exc) for f, exc in apart.refused], write)
        fenced += len(second.fenced)
        if not second.refused:
            return fenced
        third = write_apart([Failure(
            f.id, f.attempt, f.kind, f"its failure could not be stored ({reason(exc)}): "
            "discarded", None, None, True, None, None, f.ran, f.job_kind)
            for f, exc in second.refused], write)
        for failure, exc in third.refused:
            log.error("job %d attempt %d: no outcome could be written (%s); left for its "
                      "lease to expire", failure.id, failure.attempt, reason(exc))
        return fenced + len(third.fenced)

    def _interrupt(self, store: Store, interrupts: list[Failure]) -> int:
        """Write jobs cut off by the drain; one refused is written with its text cut,
        else released without an errors entry."""
        apart = write_apart(interrupts, store.interrupt)
        fenced = len(apart.fenced)
        if apart.refused:
            second = write_apart([reduced(f, exc) for f, exc in apart.refused],
                                 store.interrupt)
            fenced += len(second.fenced)
            fenced += self._apart("release", [Attempt(f.id, f.attempt) for f, _ in second.refused],
                                  store.release)
        return fenced

    def _touch(self, now: float) -> None:
        if self.since is None:
            self.since = now

