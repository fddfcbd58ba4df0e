"""Which busy child a queued job goes to: the one with the most room in its pipe (ties
to the first forked), found for a whole dispatch round at once.

A round (the dispatcher placing the jobs one claim brought, or topping up the pipes
emptied since the last turn) used to scan every child for each job it placed. At
``-n 64`` that scan was the parent's largest cost: 350,000 looks at a child's room for
8,000 jobs, two thirds of the parent's profile (issue 48). ``Rooms`` orders the
children once per round, in a heap by room, and re-checks only the child on top.

Within a round rooms only shrink (each job placed takes one; no child's answer is read
while the dispatcher runs), so the stored room of every child is at least its real room:
when the child on top still has the room it is stored with, no other child has more,
and the choice is the one the full scan made. The pool drops the order whenever a round
may be over (``Pool.push``, a child's frames, a reap, a recall): a stale order would only
choose less well, never wrongly, since the chosen child's room is always checked.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from supervisor.pool.process import ChildProcess


class Rooms:
    """The children ordered by room for one dispatch round (see the module docstring)."""

    def __init__(self) -> None:
        self._key: tuple[int, str | None] | None = None
        self._heap: list[tuple[int, int, ChildProcess]] = []

    def forget(self) -> None:
        """The round is over: the next ``roomiest`` orders the children afresh."""
        self._key = None

    def roomiest(self, children: Iterable[ChildProcess], depth: int,
                 queue: str | None) -> ChildProcess | None:
        """The child with the most room at ``depth`` (ties: the first in ``children``),
        and with ``queue`` only one whose running job is of that queue; None if no
        child has room."""
        key = (depth, queue)
        if self._key != key:
            self._key = key
            self._heap = [(-room, order, child) for order, child in enumerate(children)
                          if (room := _room(child, depth, queue)) > 0]
            heapq.heapify(self._heap)
        heap = self._heap
        while heap:
            stored, order, child = heap[0]
            room = _room(child, depth, queue)
            if room == -stored:
                return child
            if room > 0:
                heapq.heapreplace(heap, (-room, order, child))
            else:
                heapq.heappop(heap)
        return None


def _room(child: ChildProcess, depth: int, queue: str | None) -> int:
    """``child``'s room at ``depth``, or 0 if it runs another queue than ``queue``."""
    jobs = child.jobs
    if len(jobs) >= depth:
        return 0  # no room at this depth, whatever else holds: the usual case
    if queue is not None and not (jobs and jobs[0].queue == queue):
        return 0
    return child.room(depth)
