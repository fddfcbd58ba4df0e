"""Claim cursors: where each queue's next plain claim starts reading the claim index.

While something holds the MVCC horizon back (a dump, a REPEATABLE READ report, a session
idle in transaction), the claim index keeps an entry for every job claimed since, each
pointing at a row version nobody may remove, and all of them sit at the front of the
claim's ordered scan: a claim from the head walks them all (issue 40). So each queue
keeps the claim-order key (``ClaimKey``: priority, run_at, id) of the last job its
claim took, and the next claim's scan starts just after it.

A job that becomes available behind it (a producer's transaction committed after later
jobs were claimed, a retry or release, a priority raised, a plain-SQL row due long ago)
is told to every supervisor at its commit: the schema's triggers send its key on the
keys channel (schema 0029, ``Database.take_notified_keys``), and the cursor moves back to
just before its priority and run_at. The polls look for work past the cursors too,
except one in ``HEAD_POLL_EVERY`` seconds, which reads each queue's first waiting job
from the head of the index: the net for what no trigger tells (another supervisor's
claim rolled back with the rows it skipped locked, a notification lost with the
connection, which also forgets every cursor, a row inserted as available with a future
run_at before this supervisor started, that a claim of a lower priority passed). A key
told with a run_at in the future is told to the cursor again once it is due
(``DUE_SLACK``), since a claim of a lower priority may pass it meanwhile. While the
MVCC horizon is held the poll from the head is spaced by the hold's age
(``horizon.spaced_by_hold``). Without LISTEN (poll only) every poll reads from the head, as
every claim did before.

Aged and per-key claims scan from the head as before (``ClaimRequest.start`` is None):
their candidates are found per priority level and per key, not past one key.

A fair queue (``fair = "batch"``) keeps three kinds of cursor (``FairStart``). Its group
of jobs of no batch starts at a key, kept as above, except that the claim takes turns
between groups: the statement says how far its look at the head was taken in order
(``loose_next``: just before the first job of that look it did not take), and the key
moves there. Its walk of the batches starts at a batch id: the
lowest batch that still had waiting members when the last claim began (the claim
returns it), so a pipeline's finished batches fall behind for good. And each batch it
claimed from is read past the key of the last member taken (a claim takes each batch's
members from its front), so a batch of 100,000 members is not walked from its start at
every claim while a hold keeps the entries of those claimed. A notice names the lowest
batch it made a member available in (schema 0030's keys channel): the walk moves back
to it, and every batch's key past the notice's key moves back to it. A notice from a
schema without the batch field sends the walk back to the lowest batch. A poll's find
moves the group's key back only: a poll reads a busy fair queue from the head, so it
finds the first waiting member, behind the later batches' cursors, often in a snapshot
older than the claim in flight. Each poll from the head forgets the batch cursors and
sends the walk back to the lowest batch (the net for what no notice told, as above).
Other polls read a fair queue past its key once its last claim came back short or empty
(nothing due was left behind it then), and from the head otherwise; while its last claim came
back full the poll skips it (the queue surely has work; ``polling.Poller``).
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from shared.jobs import ClaimedJob
from supervisor.db import ClaimKey
from supervisor.engine.horizon import HeldPassPacing

# Seconds between polls that look from the head of the claim index. Under a held horizon
# such a poll walks every entry claimed since the hold began, so it is kept rare; it only
# catches what no notification tells (see above).
HEAD_POLL_EVERY = 60.0
# A job told with a run_at in the future (a plain-SQL row inserted available and due
# later) is told again to the cursor this long after its run_at: a claim of a lower
# priority may pass it before it is due, and nothing else tells it when it becomes due.
# The slack covers the two clocks (ours and the server's) differing by under a second.
DUE_SLACK = 1.0
DUE_LATER_MAX = 1024  # keys kept per queue; past that the poll from the head finds them
# Batch cursors kept per fair queue. Past that the lowest go: a batch without one is found
# by the walk's probe from its start (its claimed members' entries read again), no job
# is missed.
BATCH_KEYS_MAX = 1024


@dataclass(frozen=True, slots=True)
class FairStart:
    """Where a fair claim starts: its group of jobs of no batch after ``loose`` (None:
    the head of the index), its walk of the batches at ``first_batch`` (None: the
    lowest batch), each batch in ``batches`` after its key (others: from their start)."""

    loose: ClaimKey | None
    first_batch: int | None
    batches: Mapping[int, ClaimKey] = field(default_factory=dict)


class ClaimCursors:
    """The start of each queue's next plain claim, learnt from claims and polls. One
    claim per queue is out at a time (the claimer's rule)."""

    def __init__(self, wall: Callable[[], float] = time.time) -> None:
        self._wall = wall  # epoch seconds, to compare with the keys' run_at
        self._last: dict[str, ClaimKey] = {}  # queue -> key of the last job claimed
        self._moves: dict[str, int] = {}  # queue -> times a poll moved its cursor back
        self._asked: dict[str, int] = {}  # queue -> _moves when its claim went out
        self._next_head_poll = float("-inf")
        self._last_head_poll = float("-inf")
        self._pacing = HeldPassPacing(HEAD_POLL_EVERY)
        self._loose: dict[str, ClaimKey] = {}  # fair queue -> its jobs of no batch start
        self._first_batch: dict[str, int] = {}  # fair queue -> its batch walk's start
        # fair queue -> batch -> key of the last member its claims took
        self._batch_keys: dict[str, dict[int, ClaimKey]] = {}
        self._drained: set[str] = set()  # fair queues whose last claim came back short
        self._resets = 0  # batch cursors forgotten by a poll from the head
        self._walk_moves: dict[str, int] = {}  # queue -> times a notice moved its walk back
        self._fair_asked: dict[str, tuple[int, int]] = {}  # queue -> (_walk_moves, _resets)
        # queue -> the first key a notice (not a poll) told while its fair claim was out
        self._notified_while_out: dict[str, ClaimKey] = {}
        # queue -> the first key told (NOTIFY, poll) while its claim was out: that claim's
        # snapshot may predate the job, so the cursor may not pass it on the answer.
        self._told_while_out: dict[str, ClaimKey] = {}
        self.head_poll = True  # the last poll read every queue from the head
        # queue -> (run_at, key) of jobs told while not yet due, earliest first (heapq)
        self._due_later: dict[str, list[tuple[float, ClaimKey]]] = {}

    def start(self, queue: str) -> ClaimKey | None:
        """Where ``queue``'s next plain claim, going out now, starts; None: at the head
        of the index."""
        self._asked[queue] = self._moves.get(queue, 0)
        self._told_while_out.pop(queue, None)
        return self._from(queue)

    def fair_start(self, queue: str) -> FairStart:
        """Where ``queue``'s next fair claim, going out now, starts."""
        self._fair_asked[queue] = (self._walk_moves.get(queue, 0), self._resets)
        self._told_while_out.pop(queue, None)
        self._notified_while_out.pop(queue, None)
        first_batch = self._first_batch.get(queue)
        keys = self._batch_keys.get(queue, {})
        if first_batch is not None:
            keys = {batch: key for batch, key in keys.items() if batch >= first_batch}
            self._batch_keys[queue] = keys
        return FairStart(self._loose.get(queue), first_batch, dict(keys))

    def fair_claimed(self, queue: str, jobs: Sequence[ClaimedJob], limit: int) -> None:
        """The fair claim of ``queue`` for ``limit`` jobs took ``jobs`` (see the module's
        words). Nothing is learnt from a claim out across a poll from the head, and its
        walk's start is not if a notice moved the walk back meanwhile; a cursor is not
        moved past a key told while it was out."""
        asked = self._fair_asked.pop(queue, None)
        told = self._told_while_out.pop(queue, None)
        notified = self._notified_while_out.pop(queue, None)
        if asked is None or asked[1] != self._resets:
            self._drained.discard(queue)
            return
        if not jobs:  # nothing due past any cursor: an idle queue's polls read past them
            self._drained.add(queue)
            return
        if len(jobs) < limit:
            self._drained.add(queue)
        else:
            self._drained.discard(queue)
        # The claim says how far its look at the head was taken, in order (the group of
        # jobs of no batch chooses from that look).
        position = jobs[0].loose_next
        if position is not None:
            end = ClaimKey(position.priority, position.run_at, position.id)
            last = _not_past(end, told if _earlier(told, end) else None)
            held = self._loose.get(queue)
            self._loose[queue] = last if held is None else max(held, last)
        # Each batch's members are taken from its front, in key order (the claim takes a
        # batch's n-th before its n+1-th): its next claim reads past the last taken. Held
        # back by any job a notice told while the claim was out (a poll's find says
        # nothing of later batches): a batch's members share one priority and run_at, so
        # a member released meanwhile ties with where the claim ended (a new batch is
        # then read again from its start once, one claim's worth).
        ends: dict[int, ClaimKey] = {}
        for job in jobs:
            if job.batch_id is not None:
                key = ClaimKey.of(job)
                ends[job.batch_id] = max(ends.get(job.batch_id, key), key)
        if ends:
            keys = self._batch_keys.setdefault(queue, {})
            for batch, end in ends.items():
                last = _not_past(end, notified)
                held = keys.get(batch)
                keys[batch] = last if held is None else max(held, last)
            for batch in sorted(keys)[:max(0, len(keys) - BATCH_KEYS_MAX)]:
                del keys[batch]
        first_batch = jobs[0].first_batch
        if first_batch is not None and asked[0] == self._walk_moves.get(queue, 0):
            self._first_batch[queue] = first_batch

    def poll_starts(self, now: float, listening: bool) -> dict[str, ClaimKey]:
        """Where a poll at ``now`` looks for each queue's work (queues left out: from the
        head). From the head once per ``HEAD_POLL_EVERY`` and always without LISTEN;
        that poll also sends the fair claims' walks back to the lowest batch and forgets
        their batch cursors. A fair queue is looked at past its key only when its last
        claim came back short or empty."""
        self._tell_due()
        self.head_poll = not listening or now >= self._next_head_poll
        if self.head_poll:
            self._resets += 1
            self._first_batch.clear()
            self._batch_keys.clear()
            self._drained.clear()
            self._last_head_poll = now
            self._next_head_poll = self._pacing.due(now)
            return {}
        starts = {queue: start for queue in self._last if (start := self._from(queue))}
        for queue in self._drained:
            loose = self._loose.get(queue)
            if loose is not None:
                starts[queue] = loose
        return starts

    def horizon_held(self, seconds: float, now: float) -> None:
        """The MVCC horizon has been held ``seconds`` (0: not held), as of a look at
        its holder at ``now``: the poll from the head is spaced by it
        (``spaced_by_hold``), and comes back to ``HEAD_POLL_EVERY`` once a look finds it
        let go, the first ``AFTER_HOLD`` after that look."""
        self._pacing.looked(seconds, now)
        self._next_head_poll = self._pacing.due(self._last_head_poll)

    def _tell_due(self) -> None:
        """Tell the cursors again of the jobs told before they were due that are due
        now (``DUE_SLACK`` after their run_at)."""
        if not self._due_later:
            return
        due_by = self._wall() - DUE_SLACK
        now_due: dict[str, ClaimKey] = {}
        for queue, waiting in list(self._due_later.items()):
            while waiting and waiting[0][0] <= due_by:
                _, key = heapq.heappop(waiting)
                held = now_due.get(queue)
                now_due[queue] = key if held is None else min(held, key)
            if not waiting:
                del self._due_later[queue]
        if now_due:
            self.observed(now_due)

    def _from(self, queue: str) -> ClaimKey | None:
        return self._last.get(queue)

    def claimed(self, queue: str, jobs: Iterable[ClaimedJob]) -> None:
        """The plain claim of ``queue`` took ``jobs``: the next one starts past them,
        unless a poll moved the cursor back while it was out (it started past the job
        the poll found, so it cannot have taken it)."""
        told = self._told_while_out.pop(queue, None)
        if self._asked.pop(queue, None) != self._moves.get(queue, 0):
            return
        keys = [ClaimKey.of(job) for job in jobs]
        if keys:
            self._last[queue] = _not_past(max(keys), told)

    def observed(self, first: Mapping[str, ClaimKey],
                 batches: Mapping[str, int | None] | None = None,
                 polled: bool = False) -> None:
        """A job of each queue was found waiting at ``first[queue]`` (by a poll, or named
        by a notification): a cursor past it moves back to it. ``batches``: for the
        queues a notification named, the lowest batch it made a member available in
        (None: no batch); a fair claim's walk moves back to it. A queue left out (a
        poll's find, an older schema's notice) sends the walk back to the lowest batch
        if a cursor moved back. ``polled``: found by a poll, which reads a busy fair
        queue from the head and so finds the first waiting member of its first batch,
        behind every later batch's cursor, often in a snapshot older than the claim in
        flight: the walk and the batch cursors stay (a job made available behind them is
        told by its notice, or found by the poll from the head, which forgets them).
        Sending the walk back to the lowest batch at such a find walked every batch the
        hold kept, about once a second (34 entries per job under a held horizon in
        batches of 5,000)."""
        wall = self._wall() if first else 0.0
        told_batches = batches or {}
        for queue, key in first.items():
            if queue in told_batches:
                batch = told_batches[queue]
                walk = self._first_batch.get(queue)
                if batch is not None and walk is not None and batch < walk:
                    self._first_batch[queue] = batch
                    self._walk_moves[queue] = self._walk_moves.get(queue, 0) + 1
            keys = None if polled else self._batch_keys.get(queue)
            if keys:
                for batch, past in keys.items():
                    if key <= past and key.before() < past:
                        keys[batch] = key.before()
                        self._drained.discard(queue)
            if key.run_at > wall:  # not due yet: a claim may pass it before it is
                self._remember_due(queue, key)
            if queue in self._asked or queue in self._fair_asked:  # its claim is out
                told = self._told_while_out.get(queue)
                self._told_while_out[queue] = key if told is None else min(told, key)
                if not polled and queue in self._fair_asked:
                    held = self._notified_while_out.get(queue)
                    self._notified_while_out[queue] = key if held is None else min(held, key)
            for cursors in (self._last, self._loose):
                last = cursors.get(queue)
                # A notification's key has no id (0): its job may be at the cursor's own
                # priority and run_at, so it counts as behind when it ties.
                if last is not None and key <= last and key.before() < last:
                    cursors[queue] = key.before()
                    self._moves[queue] = self._moves.get(queue, 0) + 1
                    if queue not in told_batches and not polled:  # batch not told
                        self._first_batch.pop(queue, None)
                        self._walk_moves[queue] = self._walk_moves.get(queue, 0) + 1

    def _remember_due(self, queue: str, key: ClaimKey) -> None:
        waiting = self._due_later.setdefault(queue, [])
        entry = (key.run_at, key)
        if len(waiting) < DUE_LATER_MAX:
            heapq.heappush(waiting, entry)
        elif entry < max(waiting):  # keep the earliest; the poll from the head has the rest
            waiting.remove(max(waiting))
            waiting.append(entry)
            heapq.heapify(waiting)

    def forget(self) -> None:
        """Every queue's next claim scans from the head (the set of kinds changed, or
        notifications may have been lost with the connection)."""
        self._last.clear()
        self._loose.clear()
        self._first_batch.clear()
        self._batch_keys.clear()
        self._drained.clear()


def _earlier(told: ClaimKey | None, end: ClaimKey) -> bool:
    """Whether a key told while a fair claim was out holds back the key of its group of
    jobs of no batch, which the claim moved to ``end``: only one told at an earlier
    priority or run_at. A batch enqueued while
    the claim was out names its own run_at, which the claim's members of it reached,
    and holding the cursor back to it re-read that batch's claimed entries at every
    claim (4.5x the entries per job under a held horizon). A release at the very key
    the claim ended on is left to the polls from the head."""
    return told is not None and (told.priority, told.run_at) < (end.priority, end.run_at)


def _not_past(end: ClaimKey, told: ClaimKey | None) -> ClaimKey:
    """Where the next claim starts after one that ended at ``end``: not past a job told
    while that claim was out (``told``), which its snapshot may not have seen. Without
    this a release committed while a claim was out from the very key the release named
    (the cursor already moved back there, so the notice moved nothing) was passed over
    for good, until the next poll from the head (a pause-and-resume storm left six jobs
    waiting 60 s)."""
    if told is None or told > end:
        return end
    # Just before it: a poll names its job's id, a notification none (before them all).
    return ClaimKey(told.priority, told.run_at, told.id - 1) if told.id else told.before()
