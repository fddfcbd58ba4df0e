"""What the engine does with each outcome the pool reports: end it in the ledger, put
its write in the outbox, log failures (one line each: job id, kind, attempt, reason,
verdict) and count it in the metrics. A crash that may repeat the job's last one is
logged once its write says whether it was poison (``settle_failures``), never as "will
retry" first and "discarded as poison" a moment later. A start goes to the outbox (the
attempt counts from it); a job that came back from a child unstarted waits for another
child, or goes back to the database once the supervisor drains, its attempt unspent."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from shared import jobs, wire
from shared.usage import Usage
from supervisor.db import FailuresWritten
from supervisor.engine.ledger import Ledger
from supervisor.engine.outbox import Outbox
from supervisor.engine.policy import retry_delay
from supervisor.observe import SupervisorMetrics, job_fields
from supervisor.pool import (
    ChildEvent,
    JobCheckpoint,
    JobDone,
    JobExpired,
    JobFailed,
    JobProgress,
    JobReturned,
    JobStarted,
    Outcome,
)

log = logging.getLogger("supervisor.jobs")

# Child events that end a child, as the metrics' exit reasons.
_EXITS = {"recycled": "recycle", "exited": "exited", "killed": "killed",
          "boot_failed": "boot_failed"}


@dataclass(frozen=True, slots=True)
class _Undecided:
    """A failed attempt whose verdict (retry or poison) its write decides. ``final``: its
    last attempt, said as discarded at once; only the reason its metrics give (its
    failure, or poison) waits for the write."""

    job: jobs.ClaimedJob
    failure: str
    message: str
    duration: float | None
    final: bool = False


@dataclass(frozen=True, slots=True)
class _ParentDiscard:
    """A failed attempt of a job whose child the parent ended or lost: if its write
    discards the job (its last attempt, or poison), another child runs the job's
    ``on_discard`` hooks (``shared.discarded``)."""

    job: jobs.ClaimedJob
    failure: str
    message: str
    usage: Usage | None
    final: bool


class OutcomeReporter:
    """Turns pool outcomes into ledger entries, outbox writes, log lines and metrics."""

    def __init__(self, ledger: Ledger, outbox: Outbox, metrics: SupervisorMetrics) -> None:
        self.ledger = ledger
        self.outbox = outbox
        self.metrics = metrics
        self._killed: set[int] = set()  # children counted at their kill, not again at exit
        self.releasing = False  # draining: jobs that come back unstarted are released
        # Queues a job of which ended since the engine last asked (``take_ended``): a
        # queue whose keys were all at their limit may claim again.
        self.ended_queues: set[str] = set()
        self._native_news = False  # a child went busy in native code since last asked
        # Which failures count as crashes, per kind (the engine's, from the handlers).
        self.crash_rule = jobs.CrashRule()
        # Kinds of attempts whose failure counts as a crash (``crash_rule``) since the
        # engine last asked: what the per-kind circuit breaker counts.
        self.crashes: list[str] = []
        # Discarded jobs by reason: the failure kind of the last attempt, or "poison".
        self.discard_reasons: Counter[str] = Counter()
        # Crashes that would retry unless the row shows the same crash before: logged
        # by ``settle_failures`` once written, keyed by (job id, attempt).
        self._undecided: dict[tuple[int, int], _Undecided] = {}
        # Attempts whose child is gone, until their write says whether they discarded
        # their job; then the DISCARDED notices for another child (``take_discarded``).
        self._parent_discards: dict[tuple[int, int], _ParentDiscard] = {}
        self.discarded: list[wire.Discarded] = []
        # Each attempt's peak memory teaches admission its kind's size (issue 51), under
        # a memory budget only.
        admission = ledger.admission
        self._learn = (admission.learned if admission is not None
                       and admission.budget.memory is not None else None)

    def record(self, outcomes: Iterable[Outcome], now: float) -> None:
        """Book every outcome, in the order the pool reported them."""
        for outcome in outcomes:
            # type() identity, not isinstance: cheaper per job, and nothing subclasses them.
            if type(outcome) is JobStarted:
                self.ledger.started(outcome.job)
                self.outbox.started(outcome.job, now)
                self.metrics.job_started(outcome.job)
            elif type(outcome) is JobDone:
                self.ledger.ended(outcome.job, "completed")
                self.ended_queues.add(outcome.job.queue)
                self.outbox.completed(outcome.job, outcome.result_json, now, outcome.usage,
                                      outcome.output)
                self.metrics.job_done(outcome.job, outcome.duration)
                if outcome.usage is not None:
                    self.metrics.job_cpu(outcome.job, outcome.usage.cpu_seconds)
                    if self._learn is not None:
                        self._learn(outcome.job, outcome.usage.max_rss_bytes)
            elif type(outcome) is JobFailed:
                self._failed(outcome, now)
            elif type(outcome) is JobReturned:
                self._returned(outcome, now)
            elif type(outcome) is JobExpired:
                self._expired(outcome.job, now)
            elif isinstance(outcome, JobProgress):
                self.outbox.progressed(outcome.job, outcome.progress)
            elif isinstance(outcome, JobCheckpoint):
                self.outbox.checkpointed(outcome.job, outcome.state_json, outcome.flush, now)
            elif isinstance(outcome, ChildEvent):
                log.debug("child %d (worker %d) %s %s", outcome.pid, outcome.worker_no,
                          outcome.what, outcome.detail)
                self._child_event(outcome)

    def take_native_news(self) -> bool:
        """Whether a child was found busy in native code since the last call."""
        news, self._native_news = self._native_news, False
        return news

    def take_ended(self) -> set[str]:
        """The queues a job of which ended since the last call."""
        ended, self.ended_queues = self.ended_queues, set()
        return ended

    def _returned(self, outcome: JobReturned, now: float) -> None:
        """A job queued in a child never started there: another child runs it (first,
        in its claimed order), or it goes back when draining or when its queue was
        paused; a job no longer ours (cancelled, lease lost) is forgotten."""
        job = outcome.job
        self.ledger.returned(job)
        if not outcome.keep:
            return
        log.debug("job %d %s came back unstarted (%s)", job.id, job.kind, outcome.why)
        if self.releasing or outcome.release:
            self.outbox.released([job], now)
        else:
            self.ledger.unpop_waiting(job)

    def _expired(self, job: jobs.ClaimedJob, now: float) -> None:
        """A job expired while queued in a child, which never started it: it ends as
        'expired', its attempt unspent."""
        log.info("job %d %s expired before it started; it will not run", job.id, job.kind,
                 extra=job_fields(job, verdict="expired"))
        self.ledger.returned(job)
        self.ledger.finished["expired"] += 1
        self.ended_queues.add(job.queue)
        self.outbox.expired(job, now)

    def _child_event(self, event: ChildEvent) -> None:
        """Count each child's end once: a killed child's later exit is the same end."""
        if event.what == "native":
            self._native_news = True
            return
        if event.what == "killed":
            if event.pid in self._killed:
                return
            self._killed.add(event.pid)
        elif event.what in ("exited", "recycled", "boot_failed") and event.pid in self._killed:
            self._killed.discard(event.pid)
            return
        if event.what in _EXITS:
            self.metrics.child_exit(_EXITS[event.what])

    def _snoozed(self, outcome: JobFailed, now: float) -> None:
        """A handler's ``workers.Snooze``: not a failure, so no retry or discard count."""
        job = outcome.job
        log.info("job %d %s attempt %d/%d snoozed for %.3g s", job.id, job.kind, job.attempt,
                 job.max_attempts, outcome.retry_delay or 0.0,
                 extra=job_fields(job, verdict="snoozed"))
        self.ledger.ended(job, "snoozed")
        self.outbox.failed(job, outcome.kind, outcome.message, None, outcome.retry_delay,
                           False, now)

    def _stopped(self, outcome: JobFailed, now: float) -> None:
        """The handler let ``Stopping`` out after a drain's or a fence's notice: the job
        goes back uncharged, without an errors entry, and resumes from its checkpoint
        wherever it runs next."""
        job = outcome.job
        log.info("job %d %s attempt %d/%d stopped after its notice, goes back (resumes "
                 "from its checkpoint)", job.id, job.kind, job.attempt, job.max_attempts,
                 extra=job_fields(job, verdict="goes back (stopped)"))
        self.ledger.ended(job, "interrupted")
        self.outbox.stopped(job, now)

    def _failed(self, outcome: JobFailed, now: float) -> None:
        job = outcome.job
        signature = self.crash_rule.signature(job.kind, outcome.kind, outcome.message)
        if signature is not None:
            self.crashes.append(job.kind)
        self.ended_queues.add(job.queue)
        shutdown = outcome.kind == jobs.FAIL_SHUTDOWN
        # Killed because the row is no longer ours (an operator cancelled it, or the
        # lease moved on): whatever the row says now stands; nothing retries from here.
        cancelled = outcome.kind == jobs.FAIL_CANCELLED
        if outcome.kind == jobs.FAIL_SNOOZE:
            self._snoozed(outcome, now)
            return
        if outcome.kind == jobs.FAIL_STOPPED:
            self._stopped(outcome, now)
            return
        discarded = not shutdown and not cancelled and (
            outcome.terminal or outcome.kind in jobs.TERMINAL_FAILURES
            or job.attempt >= job.max_attempts)
        if shutdown:
            verdict = "goes back (shutdown)"
        elif cancelled:
            verdict = "cancelled"
        elif discarded:
            verdict = "discarded"
        else:
            verdict = "will retry"
        if signature is not None and verdict in ("will retry", "discarded"):
            # Only the row knows whether this crash repeats its last ones (poison): the
            # one line about it waits for the write, and so do its metrics (a counter
            # cannot take back a discard counted under the wrong reason).
            self._undecided[(job.id, job.attempt)] = _Undecided(
                job, outcome.kind, outcome.message, outcome.duration, final=discarded)
        if outcome.kind in jobs.CRASH_FAILURES and (discarded or signature is not None):
            self._parent_discards[(job.id, job.attempt)] = _ParentDiscard(
                job, outcome.kind, outcome.message, outcome.usage, discarded)
        if signature is None or verdict != "will retry":
            log.log(logging.INFO if shutdown else logging.WARNING,
                    "job %d %s attempt %d/%d failed (%s), %s: %s", job.id, job.kind,
                    job.attempt, job.max_attempts, outcome.kind, verdict, outcome.message,
                    extra=job_fields(job, failure=outcome.kind, verdict=verdict))
        self.ledger.ended(job, "interrupted" if shutdown else "failed")
        if discarded:
            self.ledger.finished["discarded"] += 1  # jobs, apart from failed attempts
            self.discard_reasons[outcome.kind] += 1
        self.outbox.failed(job, outcome.kind, outcome.message, outcome.traceback,
                           retry_delay(job, outcome.retry_delay), outcome.terminal, now,
                           outcome.usage, outcome.output)
        if outcome.usage is not None:
            self.metrics.job_cpu(job, outcome.usage.cpu_seconds)
            if self._learn is not None:
                self._learn(job, outcome.usage.max_rss_bytes,
                            outcome.kind == jobs.FAIL_MEMORY)
        if (job.id, job.attempt) not in self._undecided:  # else counted once decided
            self.metrics.job_failed(job, outcome.kind,
                                    retried=not shutdown and not cancelled and not discarded,
                                    discarded=discarded, duration=outcome.duration)

    def settle_failures(self, written: FailuresWritten) -> None:
        """A write of failed attempts decided (``FailuresWritten``: the ids written, the
        rest fenced off, and those the rows discarded as poison). Logs the one line of
        each crash whose verdict waited for this write, and counts a poison discard
        with the others."""
        items, poisoned = written.items, written.poisoned
        for failure in items:
            told = self._parent_discards.pop((failure.id, failure.attempt), None)
            if told is not None and failure.id in written.written and (
                    told.final or failure.id in poisoned):
                self.discarded.append(_discarded(told, failure.id in poisoned))
            undecided = self._undecided.pop((failure.id, failure.attempt), None)
            if failure.id not in written.written:
                if undecided is not None:  # the attempt failed; the row is not ours now
                    self.metrics.job_failed(undecided.job, undecided.failure, retried=False,
                                            discarded=False, duration=undecided.duration)
                continue
            if undecided is None:
                if failure.id in poisoned:  # logged as discarded (its last attempt) already
                    self._reason_was_poison(failure.kind)
                continue
            job = undecided.job
            poison = failure.id in poisoned
            if undecided.final:  # said and counted as discarded at once
                if poison:
                    self._reason_was_poison(failure.kind)
                self.metrics.job_failed(job, undecided.failure, retried=False, discarded=True,
                                        duration=undecided.duration,
                                        discard_reason="poison" if poison else None)
                continue
            if poison:
                verdict = "discarded as poison (the same crash as its last attempt)"
                self.ledger.finished["discarded"] += 1
                self.discard_reasons["poison"] += 1
            else:
                verdict = "will retry"
            self.metrics.job_failed(job, undecided.failure, retried=not poison,
                                    discarded=poison, duration=undecided.duration,
                                    discard_reason="poison" if poison else None)
            log.warning("job %d %s attempt %d/%d failed (%s), %s: %s", job.id, job.kind,
                        job.attempt, job.max_attempts, undecided.failure, verdict,
                        undecided.message,
                        extra=job_fields(job, failure=undecided.failure, verdict=verdict))

    def take_discarded(self) -> list[wire.Discarded]:
        """The jobs discarded after their child was gone since the last call: each for
        another child's ``on_discard`` hooks."""
        told, self.discarded = self.discarded, []
        return told

    def _reason_was_poison(self, kind: str) -> None:
        """A discard counted under its failure kind turned out to be poison too."""
        if self.discard_reasons[kind] > 0:
            self.discard_reasons[kind] -= 1
            self.discard_reasons["poison"] += 1
            if not self.discard_reasons[kind]:
                del self.discard_reasons[kind]



def _discarded(told: _ParentDiscard, poison: bool) -> wire.Discarded:
    """The DISCARDED notice of a job: its last attempt's errors entries, as stored."""
    job = told.job
    entry: dict[str, object] = {"attempt": job.attempt, "kind": told.failure,
                                "message": told.message, "traceback": None}
    if told.usage is not None:
        entry["usage"] = told.usage._asdict()
    errors = [entry]
    if poison:
        errors.append({"attempt": job.attempt, "kind": jobs.FAIL_POISON, "traceback": None,
                       "message": f"the same crash as its last attempt ({told.failure}): "
                                  "discarded as poison, attempts left unspent"})
    return wire.Discarded(job.id, job.kind, job.queue, job.attempt, job.max_attempts,
                          job.args_json, errors)
