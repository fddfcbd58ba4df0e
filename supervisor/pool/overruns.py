"""The overrun watch on the job at the head of a child's pipe (issues 28 and 49).

Once a head job runs past its kind's overrun time (``RunTimes.overrun_after``: twice
its p95, with a floor) its child counts as overrunning: it takes no more jobs, nor
claims, until that job ends, and the jobs queued behind it are recalled (SKIP; each
comes back on its SKIPPED, or runs where it was if the child took it first, so none
runs twice) for another child, or for the table when every other child is stuck the
same way. A job alone in its pipe is watched too: a stuck child must neither be
claimed for nor sent jobs (with a pipe of one nothing would ever queue behind it to arm
the watch, and jobs claimed for it waited in the parent until it ended). A pool of one
has no other child to give anything to: nothing to watch for.

``watch`` arms the moment on the child's ``Head``; ``overran`` judges it once that
moment came. The pool arms its own deadline, logs and counts.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from supervisor.pool.process import ChildProcess
from supervisor.pool.runtimes import RunTimes


@dataclass(frozen=True, slots=True)
class OverrunRecall:
    """The jobs an overrunning child was asked to give back: how many, and why (in
    words, for the log and the child's event)."""

    asked: int
    why: str


def watch(child: ChildProcess, run_times: RunTimes, *, alone: bool) -> float | None:
    """Arm the overrun watch on ``child``'s started head job, once. Returns when it
    overruns, or None if nothing was armed (no started head, armed or overrun already,
    or ``alone``: a pool of one)."""
    head = child.head
    if head is None or not head.started or head.recall_at is not None or head.overrun:
        return None
    if alone:
        return None
    head.recall_at = head.armed_at + run_times.overrun_after(head.job.kind)
    return head.recall_at


def overran(child: ChildProcess, others: Collection[ChildProcess], run_times: RunTimes,
            now: float) -> OverrunRecall | None:
    """``child``'s head job reached its overrun time: with ``others`` (the pool's other
    active children) it counts as overrunning and what queues behind its head is asked
    back, to go to another child, or back to the table when every other child overruns
    too. Returns what was asked (None: nothing was, or nothing could be)."""
    head = child.head
    if head is None:
        return None
    head.recall_at = None
    if not others:
        return None  # a pool of one: no other child could run anything sooner
    head.overrun = True
    behind = list(child.jobs)[1:]
    if not behind:
        return None
    ran = now - head.armed_at
    why = (f"queued behind job {head.job.id} {head.job.kind}, running {ran:.2f} s "
           f"(p95 of its kind: {run_times.p95(head.job.kind) or 0:.3f} s)")
    # Every other child runs a long job too: no child here can start them sooner, so
    # they go back to the table (uncharged), where any supervisor's next claim with a
    # free child takes them, this one's included.
    release = all(other.overrun for other in others)
    if release:
        why += "; every other child runs a long job too: back to the queue"
    asked = sum(child.recall(job.id, why, release=release) for job in behind)
    return OverrunRecall(asked, why) if asked else None
