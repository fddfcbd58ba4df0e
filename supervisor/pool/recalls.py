"""Which queued jobs the pool asks back from children's pipes, and from which children.

A job queued behind the one a child runs has not started: asked back (SKIP, through
``ChildProcess.recall``), it comes back when the child says SKIPPED, or runs where it
was if the child took it first, so none runs twice. Three policies decide when that is
worth a round trip to the child; each is a function over the children, returning how
many jobs it asked back. The overrun's recall (a head past its kind's p95) is the
pool's deadline, judged in ``overruns``.

- ``take_back``: a paused queue starts nothing more; its queued jobs go back to the table.
- ``rebalance``: at the end of a queue's work an idle child takes the last half of the
  fullest pipe, so the pipes of a batch's last jobs end together (issue 31).
- ``free_for``: a queue below its allotment has jobs waiting and no child is idle; the
  children of queues above their own give back their pipes, so the next to finish goes
  to the queue owed it (issue 44).
- ``make_way``: in a fair queue a batch that just arrived has its first job claimed and
  no child holds a job of it; the child that should end its job first gives back its
  pipe, so the newcomer runs next there, not after every job already queued (issue 42).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Set

from shared import jobs
from supervisor.pool.outcomes import ReturnTo
from supervisor.pool.process import BUSY, ChildProcess
from supervisor.pool.runtimes import RunTimes
from supervisor.tuning import Tuning


def _queued(child: ChildProcess) -> list[jobs.ClaimedJob]:
    """The jobs queued behind the head of a started child, not asked back yet."""
    return [job for job in itertools.islice(child.jobs, 1, None)
            if job.id not in child.recalling]


def _armed_at(child: ChildProcess) -> float:
    """When the clock of the job at its head started (its START, once running)."""
    head = child.head
    return head.armed_at if head is not None else 0.0


def _coming_back(child: ChildProcess) -> int:
    """Jobs the child was asked to give back for another child (not released)."""
    return sum(1 for recall in child.recalling.values() if recall.to is ReturnTo.CHILD)


def take_back(children: Iterable[ChildProcess], queue: str) -> int:
    """Ask for the jobs of ``queue`` queued unstarted (the queue was paused): each comes
    back as ``JobReturned`` to the database, or runs if its child took it first."""
    asked = 0
    why = f"queue {queue} paused"
    for child in list(children):
        if child.state != BUSY:
            continue
        for job in [j for j in child.jobs if j.queue == queue]:
            asked += child.recall(job.id, why)
    return asked


def rebalance(children: Collection[ChildProcess], idle: int, run_times: RunTimes,
              exhausted: Callable[[str], bool], now: float, tuning: Tuning) -> int:
    """For each of ``idle`` idle children not already owed a job coming back, the pipe
    with the most queued jobs gives back its last ``tuning.rebalance_share`` (half).
    ``exhausted(queue)``: the queue has nothing more to claim now, so no other job is
    coming for an idle child. A lone queued job whose child should reach it within
    ``tuning.steal_min`` (its head's median run time, less how long the head has run)
    is not worth a recall to an idle child: it stays."""
    coming = sum(_coming_back(child) for child in children)
    asked = 0
    for _ in range(idle - coming):
        donor: ChildProcess | None = None
        most: list[jobs.ClaimedJob] = []
        for child in children:
            held = child.jobs  # one queue's jobs: a child runs one queue at a time
            if (child.state != BUSY or not child.started or len(held) - 1 <= len(most)
                    or not exhausted(held[-1].queue)):
                continue
            queued = _queued(child)
            if len(queued) <= len(most):
                continue
            if len(queued) == 1:
                median = run_times.median(child.jobs[0].kind)
                if median is not None and median - (now - _armed_at(child)) < tuning.steal_min:
                    continue
            donor, most = child, queued
        if donor is None:
            break
        for job in most[int(len(most) * tuning.rebalance_share):]:
            asked += donor.recall(job.id, "an idle child takes it at the end of its queue",
                                  release=False)
    return asked


def free_for(children: Collection[ChildProcess], over: Set[str], wanted: int) -> int:
    """Up to ``wanted`` children running a queue in ``over`` (above its allotment) give
    back every job queued behind the one they run, so each frees after its current job.
    The children running longest go first (their jobs should end soonest); children
    already giving jobs back count toward ``wanted``."""
    freeing = sum(1 for child in children if _coming_back(child))
    donors = sorted(
        (child for child in children
         if child.state == BUSY and child.started and len(child.jobs) > 1
         and child.jobs[0].queue in over and not child.recalling),
        key=_armed_at)
    asked = 0
    for child in donors[:max(0, wanted - freeing)]:
        why = (f"its child is owed to a queue below its share "
               f"(queue {child.jobs[0].queue} is above its own)")
        for job in _queued(child):
            asked += child.recall(job.id, why, release=False)
    return asked


def make_way(children: Collection[ChildProcess], queue: str,
             held: Counter[int | None]) -> int:
    """A fair queue's newcomer batch waits for a child (``held``: the queue's jobs in
    children per batch, none of the newcomer's). Of the children running ``queue`` whose
    next job belongs to a batch with another job held here (not a batch's only one, such
    as an earlier newcomer's), the one whose head started first, and so should end
    first, gives back every job queued behind its head; they come back behind the
    newcomer. Returns how many were asked back; 0 while a way is already being made
    (jobs of ``queue`` on their way back to another child), or when no child qualifies.
    """
    mine = [child for child in children
            if child.state == BUSY and child.jobs and child.jobs[0].queue == queue]
    if any(_coming_back(child) for child in mine):
        return 0
    donors = sorted((child for child in mine
                     if child.started and len(child.jobs) > 1 and not child.recalling
                     and held[child.jobs[1].batch_id] > 1),
                    key=_armed_at)
    if not donors:
        return 0
    donor = donors[0]
    why = f"a new batch of fair queue {queue} runs next"
    return sum(donor.recall(job.id, why, release=False) for job in _queued(donor))


def making_way(children: Iterable[ChildProcess], queue: str) -> bool:
    """Whether jobs of ``queue`` are on their way back from a child for another one."""
    return any(_coming_back(child) for child in children
               if child.jobs and child.jobs[0].queue == queue)
