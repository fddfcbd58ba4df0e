"""When the pool must next look at one of its children: a heap of per-child times.

Every deadline a child carries (boot, job timeout, heartbeat, notice, memory sample,
overrun watch, exit) is armed here when it is set or moved earlier. A deadline that
moves later (a heartbeat came, a job ended before its overrun watch, the next job
started) is not: the child's entry stays early until it reaches the top of the heap,
where it is checked against the child's real deadline before the loop sleeps on it,
and moved there. So the loop wakes for a deadline that is still set, never for a job
that has already ended (issue 43: at 100 ms jobs, 86 of about 107 timer wakes came
from the one pool-wide "possibly early" time this replaces, and one found anything
to do). Each check is O(log N) and is paid at most once per moved deadline, which a
recount of every child at each job's end (O(N) at ``-n 64``) would not be.

Besides the children's, one time belongs to the pool itself: when it may fork again
(a respawn backoff ends, the next fork batch is due).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable
from typing import Generic, NamedTuple, Protocol, TypeVar


class HasDeadline(Protocol):
    """What the heap asks of a child: the earliest moment it must be looked at."""

    def deadline(self) -> float | None: ...


ChildT = TypeVar("ChildT", bound=HasDeadline)


class _Entry(NamedTuple, Generic[ChildT]):
    when: float
    order: int  # ties are broken by arming order: children need not compare
    child: ChildT


class Deadlines(Generic[ChildT]):
    """The earliest moment any child (or the pool's own forking) needs the parent:
    ``next()`` is exact for children still being watched, ``due(now)`` names the
    children whose time has come."""

    def __init__(self) -> None:
        self._heap: list[_Entry[ChildT]] = []
        # Each watched child's entry time: an entry whose time is not its child's here
        # was replaced by an earlier one, or its child is no longer watched.
        self._armed: dict[ChildT, float] = {}
        self._order = itertools.count()
        self._pool_due: float | None = None

    def arm(self, child: ChildT, when: float | None) -> None:
        """``child`` must be looked at by ``when`` (None: nothing new). Only an
        earlier time than its entry's adds one: a later one is found at the top."""
        if when is None:
            return
        armed = self._armed.get(child)
        if armed is not None and armed <= when:
            return
        self._armed[child] = when
        heapq.heappush(self._heap, _Entry(when, next(self._order), child))

    def arm_pool(self, when: float | None) -> None:
        """The pool itself must run by ``when`` (to fork again)."""
        if when is not None and (self._pool_due is None or when < self._pool_due):
            self._pool_due = when

    def forget(self, child: ChildT) -> None:
        """``child`` is gone (reaped): its entries are dropped as they reach the top."""
        self._armed.pop(child, None)

    def next(self) -> float | None:
        """The monotonic time by which the pool must tick: a child's deadline that is
        still set, or the pool's own, whichever is first (None: nothing to wait for)."""
        child_due = self._settle_top()
        pool_due = self._pool_due
        if child_due is None:
            return pool_due
        return child_due if pool_due is None or child_due < pool_due else pool_due

    def due(self, now: float) -> list[ChildT]:
        """Take out every child whose deadline has come by ``now``, earliest first,
        and clear the pool's own time if it has come. The caller acts on each child
        and arms it again with whatever deadline it carries afterwards."""
        if self._pool_due is not None and self._pool_due <= now:
            self._pool_due = None
        found: list[ChildT] = []
        while True:
            when = self._settle_top()
            if when is None or when > now:
                return found
            entry = heapq.heappop(self._heap)
            del self._armed[entry.child]
            found.append(entry.child)

    def rearm(self, children: Iterable[ChildT]) -> None:
        """Arm each of ``children`` with the deadline it carries now."""
        for child in children:
            self.arm(child, child.deadline())

    def __len__(self) -> int:
        """Entries held, stale ones included: what the lazy drop has not yet dropped."""
        return len(self._heap)

    def _settle_top(self) -> float | None:
        """Drop or move stale entries until the top is a live child's real deadline;
        return its time (None: the heap is empty)."""
        heap = self._heap
        armed = self._armed
        while heap:
            when, _, child = heap[0]
            if armed.get(child) != when:
                heapq.heappop(heap)  # replaced by an earlier entry, or forgotten
                continue
            actual = child.deadline()
            if actual is None:
                heapq.heappop(heap)
                del armed[child]
                continue
            if actual != when:
                # Later: the deadline moved on. Earlier (a change that was not armed,
                # never expected): moved too, so the loop is never late for it.
                armed[child] = actual
                heapq.heapreplace(heap, _Entry(actual, next(self._order), child))
                continue
            return when
        return None
