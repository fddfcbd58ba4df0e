"""Dispatch: claimed jobs waiting in the ledger go into children's pipes.

Idle children go to the queue furthest below its share first; then each busy child's
pipe is topped up with jobs of the queue it runs, while that queue is within its share
(so a queue's children drain and move on when it is not). A single queue needs no share
arithmetic; jobs that declare a reservation go through admission (``admitted``). When
every child runs a job past its kind's p95, what waits here goes back to the table.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from supervisor.engine.admitted import dispatch_admitted

if TYPE_CHECKING:
    from supervisor.admission import Admission
    from supervisor.engine.ledger import Ledger
    from supervisor.engine.outbox import Outbox
    from supervisor.engine.planner import Scheduler
    from supervisor.pool import Pool

log = logging.getLogger("supervisor.engine")


class Dispatcher:
    """Hands the ledger's waiting jobs to the pool's children."""

    def __init__(self, queues: list[str], ledger: Ledger, planner: Scheduler,
                 admission: Admission, outbox: Outbox, clock) -> None:
        self.queues = queues
        self.ledger = ledger
        self.planner = planner
        self.admission = admission
        self.outbox = outbox
        self.clock = clock

    def dispatch(self, pool: Pool) -> None:
        """Queue waiting jobs in children's pipes; a child's START records each start."""
        if self.admission.engaged:  # some job declares a reservation, or a default applies
            dispatch_admitted(self.ledger, self.planner, self.admission, pool,
                              len(self.queues) == 1, self.clock())
        elif len(self.queues) == 1:  # the common case needs no share arithmetic
            self._dispatch_one(pool, self.queues[0])
        else:
            self._dispatch_shared(pool)

    def _pipeline(self, queue: str) -> int:
        planner = self.planner
        return planner.depth.pipeline(queue, planner.policies[queue].prefetch)

    def _dispatch_one(self, pool: Pool, queue: str) -> None:
        ledger = self.ledger
        depth = self._pipeline(queue)
        if self.planner.fair(queue) and self._newcomer_waits(pool, queue, depth):
            pool.push()
            return
        # A global max_running (supervisor queues limit) caps the children that run
        # the queue here; past it, only the pipes of children already running it are
        # topped up (a queued job runs after the one ahead of it, never beside it).
        cap = self.planner.start_cap(queue)
        room = None if cap is None else cap - pool.occupied()[queue]
        while (job := ledger.pop_waiting(queue)) is not None:
            idle = pool.idle_count()
            if not pool.dispatch(job, depth, own_queue=room is not None and room <= 0):
                ledger.unpop_waiting(job)
                break
            ledger.sent(job)
            if room is not None and pool.idle_count() < idle:
                room -= 1
        pool.push()

    def _newcomer_waits(self, pool: Pool, queue: str, depth: int) -> bool:
        """A fair queue's batch none of whose jobs a child holds (it just arrived) has
        its first job go first (issue 42): ahead of the jobs claimed before it here, and
        where pipes hold ``depth`` > 1 jobs, right after a running job rather than behind
        every queued one. When no child has that place free, the one that should end
        first is asked for its queued jobs (``Pool.make_way``); True while that answer
        is awaited (nothing else of the queue is dispatched meanwhile, so the place
        stays free for the newcomer)."""
        waiting = self.ledger.waiting.get(queue)
        if not waiting:
            return False
        held = pool.batch_counts(queue)
        newcomer = next((job for job in waiting if job.batch_id not in held), None)
        if newcomer is None:
            return False
        self.ledger.to_front(newcomer)
        if depth <= 1 or pool.idle_count():
            return False  # the next child free takes it
        # Only behind a job of its own queue: a child runs one queue at a time.
        if pool.dispatch(newcomer, self.planner.tuning.newcomer_place, own_queue=True):
            self.ledger.pop_waiting(queue)
            self.ledger.sent(newcomer)
            return False
        return pool.make_way(queue, held)

    def _dispatch_shared(self, pool: Pool) -> None:
        ledger, planner = self.ledger, self.planner
        size = pool.size()
        # Children per queue, counting those given a job whose START is not back yet:
        # counted by started jobs, two children made idle in one turn both went to the
        # first queue, and a second queue owed one waited behind its pipes (issue 44).
        held = pool.occupied()
        # A fair queue's newcomer goes first among its waiting jobs; while a child is
        # giving back its pipe for one, the queue tops up no pipe (the place is kept).
        making_way = {queue for queue in ledger.waiting_counts()
                      if planner.fair(queue)
                      and self._newcomer_waits(pool, queue, self._pipeline(queue))}
        while pool.idle_count() > 0:
            waiting = ledger.waiting_counts()
            chosen = planner.next_queue(size, waiting, held) if waiting else None
            if chosen is None:
                break
            job = ledger.pop_waiting(chosen)
            if job is None:
                break
            idle = pool.idle_count()
            if not pool.dispatch(job, self._pipeline(chosen)):
                ledger.unpop_waiting(job)
                break
            ledger.sent(job)
            if pool.idle_count() < idle:
                held[chosen] += 1
        waiting = ledger.waiting_counts()
        if waiting:
            targets = planner.targets(size, waiting)
            for queue in waiting:
                depth = self._pipeline(queue)
                if (depth < planner.tuning.min_top_up_pipe or held[queue] > targets.get(queue, 0)
                        or queue in making_way):
                    continue
                while (job := ledger.pop_waiting(queue)) is not None:
                    if not pool.dispatch(job, depth, own_queue=True):
                        ledger.unpop_waiting(job)
                        break
                    ledger.sent(job)
            self._free_children_owed(pool, targets, held)
        pool.push()

    def _free_children_owed(self, pool: Pool, targets: Mapping[str, int],
                            held: Mapping[str, int]) -> None:
        """Queues with jobs waiting below their allotment while no child is idle: the
        children of queues above theirs give back what their pipes hold behind the job
        they run, so the next child to finish one goes to the queue owed it, not to
        the prefetched jobs of a queue over its share (issue 44)."""
        if pool.idle_count():
            return
        waiting = self.ledger.waiting_counts()
        caps = self.planner.caps(pool.size())
        owed = sum(max(0, min(targets.get(q, 0), caps.get(q, 0)) - held.get(q, 0))
                   for q, n in waiting.items() if n > 0)
        if owed <= 0:
            return
        over = {q for q, n in held.items() if n > targets.get(q, 0)}
        if over:
            pool.free_for(over, owed)

    def all_stuck(self, now: float, pool: Pool) -> None:
        """Every child runs a job past its kind's p95 (issue 28): claimed jobs waiting
        here would wait, leased, for the first of those to end; they go back to the
        table (uncharged), where the next claim with a free child takes them."""
        size = pool.size()
        if size and pool.overrunning() >= size and self.ledger.waiting_counts():
            waiting = self.ledger.take_waiting()
            log.debug("every child runs a long job: %d claimed jobs go back", len(waiting))
            self.outbox.released(waiting, now)

    def nothing_to_claim(self, queue: str) -> bool:
        """``queue``'s last claim came back short, nothing has said since that it holds
        work (a NOTIFY, a poll), and no claim for it is out: no job of it is coming for
        an idle child, which may take one queued in another's pipe instead."""
        planner = self.planner
        return queue not in planner.demand and not planner.claiming(queue)
