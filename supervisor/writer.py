"""Writing a loop turn's outcomes: one fenced statement per kind of write.

Each group is cleared from the pending set once its statement succeeded, so after a
lost connection only what was not written is tried again. A statement that fails for
its data (a result Postgres will not store, say) is retried job by job, and a result
that cannot be stored becomes a failure of that job instead of wedging the batch.
"""

from __future__ import annotations

import logging

import psycopg

from shared import jobs
from supervisor.dispatch import PendingWrites
from supervisor.store import Completion, Failure, Store

log = logging.getLogger("supervisor.writer")


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
                               kinds: list[str], limit: int) -> list:
    """Claim for ``queue`` and, in the same statement, write the pending completions.

    Only on success are the completions taken out of ``pending``. If one of them holds
    a result Postgres refuses, the claim is made alone and the completions are left for
    ``write_pending``, which sorts out the bad one job by job.
    """
    if not pending.completions:
        return store.claim(queue, kinds, limit)
    try:
        _fenced, claimed = store.complete_and_claim(pending.completions, queue, kinds, limit)
    except psycopg.DataError:
        return store.claim(queue, kinds, limit)
    pending.completions = []
    if pending.count() == 0 and not pending.progress:
        pending.since = None
    return claimed
