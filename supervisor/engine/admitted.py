"""Dispatch under admission (issue 27): each idle child gets the first waiting job of
the chosen queue that fits the budget beside the jobs charged already (``admission/``),
one job per child, while children free of other jobs' CPU charges remain. The engine
uses it instead of its plain dispatch once ``Admission.engaged``."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from supervisor.admission import Admission
    from supervisor.engine.ledger import Ledger
    from supervisor.engine.planner import Scheduler
    from supervisor.pool import Pool


def dispatch_admitted(ledger: Ledger, planner: Scheduler, admission: Admission, pool: Pool,
                      single_queue: bool, now: float) -> None:
    """Start what fits now: a queue whose waiting jobs cannot start (none fits, patience
    holds them, its global max_running is reached) is passed over for this turn."""
    size = pool.size()
    blocked: set[str] = set()
    while True:
        free = pool.idle_count() - admission.extra_cpus
        if free <= 0:
            break
        waiting = {q: n for q, n in ledger.waiting_counts().items() if q not in blocked}
        if not waiting:
            break
        running = pool.occupied() if planner.limited() else ledger.running
        chosen = (next(iter(waiting)) if single_queue
                  else planner.next_queue(size, waiting, running))
        if chosen is None:
            break
        cap = planner.start_cap(chosen)
        if cap is not None and pool.occupied()[chosen] >= cap:
            blocked.add(chosen)
            continue
        index = admission.choose(ledger.waiting[chosen], free, now)
        if index is None:
            blocked.add(chosen)
            continue
        job = ledger.take_waiting_at(chosen, index)
        admission.charge(job)  # first: the RUN frame carries the devices it holds
        if not pool.dispatch(job, 1):
            admission.release(job.id)
            ledger.unpop_waiting(job)
            break
        ledger.sent(job)
    pool.push()
