"""Claim cursors: where each queue's next plain claim starts reading the claim index.

While something holds the MVCC horizon back (a dump, a REPEATABLE READ report, a session
idle in transaction), the claim index keeps an entry for every job claimed since, each
pointing at a row version nobody may remove, and all of them sit at the front of the
claim's ordered scan: a claim from the head walks them all (issue 40). So each queue
keeps the claim-order key (``ClaimKey``: priority, run_at) of the last job its claim
took, and the next claim's scan starts there, ``SLACK`` seconds earlier: producers
commit a little out of order, and a job committed just after a later one is still
found by the next claim.

A job that becomes available further behind (a producer's long transaction committed
late, a retry or release due earlier, a priority raised, a kind resumed, a claim of
another supervisor rolled back) is found by the next poll, which reads each queue's
first waiting job in claim order (``Store.queues_with_work``): the cursor moves back to
it. So such a job waits at most one poll interval (``poll_interval``, 1 s by default)
longer than it did with every claim scanning from the head; nothing is ever left behind.

Aged and per-key claims scan from the head as before (``ClaimRequest.start`` is None):
their candidates are found per priority level and per key, not past one key.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from shared.jobs import ClaimedJob
from supervisor.db import ClaimKey

# Seconds before the last claimed job's run_at the next scan starts: out-of-order
# commits closer than this are claimed at once, later ones by the poll. A wider window
# re-reads more entries of claimed jobs under a held horizon (rate x SLACK a claim).
SLACK = 0.05


class ClaimCursors:
    """The start of each queue's next plain claim, learnt from claims and polls. One
    claim per queue is out at a time (the claimer's rule)."""

    def __init__(self) -> None:
        self._last: dict[str, ClaimKey] = {}  # queue -> key of the last job claimed
        self._moves: dict[str, int] = {}  # queue -> times a poll moved its cursor back
        self._asked: dict[str, int] = {}  # queue -> _moves when its claim went out

    def start(self, queue: str) -> ClaimKey | None:
        """Where ``queue``'s next plain claim, going out now, starts; None: at the head
        of the index."""
        self._asked[queue] = self._moves.get(queue, 0)
        last = self._last.get(queue)
        return None if last is None else replace(last, run_at=last.run_at - SLACK)

    def claimed(self, queue: str, jobs: Iterable[ClaimedJob]) -> None:
        """The plain claim of ``queue`` took ``jobs``: the next one starts past them,
        unless a poll moved the cursor back while it was out (it started past the job
        the poll found, so it cannot have taken it)."""
        if self._asked.pop(queue, None) != self._moves.get(queue, 0):
            return
        keys = [ClaimKey.of(job) for job in jobs]
        if keys:
            self._last[queue] = max(keys)

    def observed(self, first: Mapping[str, ClaimKey]) -> None:
        """A poll found each queue's first waiting job: a cursor past one moves back."""
        for queue, key in first.items():
            last = self._last.get(queue)
            if last is not None and key < last:
                self._last[queue] = key
                self._moves[queue] = self._moves.get(queue, 0) + 1

    def forget(self) -> None:
        """Every queue's next claim scans from the head (the set of kinds changed)."""
        self._last.clear()
