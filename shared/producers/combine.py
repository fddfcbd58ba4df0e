"""Concurrent callers share round trips: flat combining on top of the producer pool.

Every ``enqueue`` without ``conn=`` is its own transaction, and on this kind of machine a
commit (a WAL flush) and a round trip cost more than the insert itself: eight threads
each committing on their own connection measured no faster than one thread (docs/
bench-notes/producers.md). So a caller whose job is the common ``Row`` hands it to the
combiner. If fewer than ``MAX_LEADERS`` callers are sending, it becomes a leader: it
takes every job waiting at that moment (its own among them) and sends them in one
statement on a pooled connection, one commit for all, then gives each caller its id.
Callers that arrive while leaders are busy wait for the next leader's batch. A lone
caller is its own leader with a batch of one: the plain INSERT, no extra cost.

Each job is still committed before its caller returns, and a caller never gets another
caller's id. A batch that fails for a reason one job could cause (a user's trigger or
constraint) rolled back whole and is retried one job at a time, so each caller gets its
own outcome; a lost connection is not retried (the batch's fate is unknown) and every
caller in it gets the same one-line ``DatabaseUnavailable``. No thread is started: the
callers' own threads do the sending.
"""

from __future__ import annotations

import os
import threading

from shared.db import DatabaseUnavailable
from shared.producers.connections import drive, drive_row
from shared.producers.plans import Row, insert_rows
from shared.producers.pool import ProducerPool, producer_pool

MAX_LEADERS = 2  # batches in flight at once per process and database


class Pending:
    """One caller's Row on its way: taken by a leader, then done with an id or an error."""

    __slots__ = ("done", "error", "id", "row", "taken")

    def __init__(self, row: Row) -> None:
        self.row = row
        self.id = 0
        self.error: BaseException | None = None
        self.taken = False  # in some leader's batch
        self.done = False


class Combiner:
    """Batches the Rows of concurrent callers into shared statements (see module doc)."""

    def __init__(self, pool: ProducerPool, max_leaders: int = MAX_LEADERS) -> None:
        self.pool = pool
        self.pid = pool.pid
        self.max_leaders = max_leaders
        self.batches = 0  # statements sent, for tests and benchmarks
        self._cond = threading.Condition(threading.Lock())
        self._waiting: list[Pending] = []
        self._leaders = 0

    def insert(self, row: Row) -> int:
        """Store ``row`` (committed when this returns) and return its job id."""
        job = Pending(row)
        with self._cond:
            self._waiting.append(job)
            try:
                while not job.done and (job.taken or self._leaders >= self.max_leaders):
                    self._cond.wait()
            except BaseException:
                if not job.taken:  # interrupted before any leader took it: never sent
                    self._waiting.remove(job)
                raise
            if not job.done:
                self._leaders += 1
                batch, self._waiting = self._waiting, []
                for member in batch:
                    member.taken = True
        if not job.done:
            try:
                self._send(batch, job)
            finally:
                with self._cond:
                    self._leaders -= 1
                    self._cond.notify_all()
        if job.error is not None:
            raise job.error
        return job.id

    def _send(self, batch: list[Pending], own: Pending) -> None:
        try:
            ids = self._run([job.row for job in batch])
        except DatabaseUnavailable as exc:
            for job in batch:
                job.error = DatabaseUnavailable(str(exc))
        except Exception as exc:
            if len(batch) == 1:
                own.error = exc
            else:
                self._one_by_one(batch)
        except BaseException:
            for job in batch:  # the leader's own interruption goes up its own stack
                if job is not own:
                    job.error = DatabaseUnavailable(
                        "enqueue interrupted in another thread; the job was not confirmed")
            raise
        else:
            for job, job_id in zip(batch, ids, strict=True):
                job.id = job_id
        finally:
            for job in batch:
                job.done = True

    def _one_by_one(self, batch: list[Pending]) -> None:
        # The failed statement rolled back whole, so resending each job is safe.
        for job in batch:
            try:
                [job.id] = self._run([job.row])
            except Exception as exc:
                job.error = exc

    def _run(self, rows: list[Row]) -> list[int]:
        cur = self.pool.take()
        try:
            self.batches += 1
            if len(rows) == 1:
                return [drive_row(cur, rows[0])]
            return drive(cur, insert_rows(rows), atomic=False)
        finally:
            self.pool.give_back(cur)


_combiners: dict[str, Combiner] = {}
_combiners_lock = threading.Lock()


def combiner(dsn: str) -> Combiner:
    """This process's combiner for ``dsn`` (a new process starts with none)."""
    found = _combiners.get(dsn)
    if found is not None and found.pid == os.getpid():
        return found
    pool = producer_pool(dsn)
    with _combiners_lock:
        found = _combiners.get(dsn)
        if found is None or found.pid != os.getpid() or found.pool is not pool:
            found = _combiners[dsn] = Combiner(pool)
        return found


def _after_fork_in_child() -> None:
    # A lock held by a leader thread at the fork would stay held: start over.
    global _combiners, _combiners_lock
    _combiners = {}
    _combiners_lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)
