"""Writing outcomes: when (``OutcomeWriter``) and how (one fenced statement per kind).

Each group is cleared from the pending set once its statement succeeded, so after a
lost connection only what was not written is tried again. A statement that fails for
its data (a result Postgres will not store, say) is retried job by job, and a result
that cannot be stored becomes a failure of that job instead of wedging the batch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import psycopg

from shared import jobs
from supervisor.db.store import Completion, Failure, Store
from supervisor.engine.ledger import PendingWrites

log = logging.getLogger("supervisor.writer")

BATCH = 512  # this many waiting outcomes are written at once, whatever else is due
CARRY_LIMIT = 0.5  # longest completions wait for a claim in flight to carry them


class OutcomeWriter:
    """Decides when the pending outcomes are written, and writes them.

    Completions usually ride on the next claim (``claimer``); they are written on
    their own only when no claim will carry them soon. Failures, releases and
    interruptions are written within ``flush_interval``.
    """

    def __init__(self, ledger, db, metrics, flush_interval: float,
                 claim_in_flight: Callable[[], bool]) -> None:
        self.ledger = ledger
        self.db = db
        self.metrics = metrics
        self.flush_interval = flush_interval
        self.claim_in_flight = claim_in_flight

    def next_flush_at(self) -> float | None:
        """When pending outcomes must be written (None: nothing pending)."""
        pending = self.ledger.pending
        if pending.since is None:
            return None
        if pending.count() >= BATCH:
            return pending.since
        only_completions = pending.count() == len(pending.completions)
        if only_completions and self.claim_in_flight():
            return pending.since + max(self.flush_interval, CARRY_LIMIT)
        return pending.since + self.flush_interval

    def due(self, now: float) -> bool:
        """Whether a write is due now."""
        at = self.next_flush_at()
        return at is not None and now >= at

    def flush(self, force: bool = False) -> None:
        """Write everything pending; what cannot be written (database down) stays
        pending for the next try. ``force``: this is the last chance, before exit."""
        pending = self.ledger.pending
        if pending.count() == 0 and not pending.progress:
            pending.since = None
            return
        taken = pending.take()
        fenced = self.db.call(lambda store: write_pending(store, taken), 0)
        if fenced:
            self.metrics.fenced("write", fenced)
        pending.merge_back(taken)
        if force and pending.count():
            log.error("%d finished jobs could not be written before exit; their leases will "
                      "expire and another supervisor will rerun them", pending.count())


def write_pending(store: Store, pending: PendingWrites) -> int:
    """Write everything in ``pending`` and empty it; returns how many writes were fenced
    off (their lease had moved on). Connection errors propagate with the unwritten rest
    still in ``pending``."""
    fenced = 0
    if pending.completions:
        fenced += _complete(store, pending.completions)
        pending.completions = []
    if pending.failures:
        fenced += len(store.fail(pending.failures))
        pending.failures = []
    if pending.interrupts:
        fenced += len(store.interrupt(pending.interrupts))
        pending.interrupts = []
    if pending.releases:
        fenced += len(store.release(pending.releases))
        pending.releases = []
    if pending.progress:
        items = [(job_id, attempt) for job_id, (attempt, _) in pending.progress.items()]
        progress = {job_id: report for job_id, (_, report) in pending.progress.items()}
        store.renew(items, progress)
        pending.progress = {}
    pending.since = None
    return fenced


def _complete(store: Store, completions: list[Completion]) -> int:
    try:
        return len(store.complete(completions))
    except psycopg.DataError:
        pass
    fenced = 0
    unstorable = []
    for item in completions:
        try:
            fenced += len(store.complete([item]))
        except psycopg.DataError as exc:
            message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            unstorable.append(Failure(item.id, item.attempt, jobs.FAIL_RESULT,
                                      f"result could not be stored: {message}", None, None, True))
    if unstorable:
        log.warning("%d results could not be stored; those jobs are discarded", len(unstorable))
        fenced += len(store.fail(unstorable))
    return fenced


def claim_carrying_completions(store: Store, pending: PendingWrites, queue: str,
                               kinds: list[str], limit: int, aging: float = 0.0) -> list:
    """Claim for ``queue`` and, in the same statement, write the pending completions.

    Only on success are the completions taken out of ``pending``. If one of them holds
    a result Postgres refuses, the claim is made alone and the completions are left for
    ``write_pending``, which sorts out the bad one job by job.
    """
    if not pending.completions:
        return store.claim(queue, kinds, limit, aging)
    try:
        _fenced, claimed = store.complete_and_claim(pending.completions, queue, kinds, limit,
                                                    aging)
    except psycopg.DataError:
        return store.claim(queue, kinds, limit, aging)
    pending.completions = []
    if pending.count() == 0 and not pending.progress:
        pending.since = None
    return claimed
