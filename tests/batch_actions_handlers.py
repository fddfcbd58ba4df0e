"""Handlers for the per-batch action and failure budget tests (issue 42), loaded with
``--app batch_actions_handlers``. Each writes to the file named by ``E2E_LOG``."""

import os
import time

from e2e_handlers import record

from workers import current_job, job


@job(queue="ba")
def ba_member(n: int = 0, sleep: float = 0.0, fail_if: str = "") -> int:
    """A member: records its start; fails (an exception, so it is retried) while the
    file ``fail_if`` exists."""
    record("run", n=n)
    if sleep:
        time.sleep(sleep)
    if fail_if and os.path.exists(fail_if):
        raise RuntimeError(f"member {n}: bad input")
    return n


@job(queue="ba")
def ba_callback() -> None:
    """The callback: records the summary it was called with."""
    batch = current_job().batch
    s = batch.summary
    record("callback", batch=batch.id, total=s.total, completed=s.completed,
           discarded=s.discarded, cancelled=s.cancelled, stopped=s.stopped,
           aborted=s.aborted, reason=s.reason, failures=s.failures)
