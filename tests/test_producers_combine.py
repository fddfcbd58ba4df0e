"""Flat combining of concurrent enqueues, made deterministic: a table lock holds the
first leader's statement while other callers queue up behind it; on release the next
leader sends them all in one statement."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from shared.db import DatabaseUnavailable
from shared.producers import combine
from shared.producers.plans import Row
from shared.producers.pool import producer_pool

pytestmark = pytest.mark.timeout(60)


def wait_for(condition, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def row(n: int | str) -> Row:
    return Row("k", "default", f'{{"n": {n!r}}}'.replace("'", '"'), 0, 20, None)


class Callers:
    """Threads calling ``combiner.insert``; each keeps its own outcome."""

    def __init__(self, combiner: combine.Combiner) -> None:
        self.combiner = combiner
        self.outcomes: dict[int | str, int | BaseException] = {}
        self.threads: list[threading.Thread] = []

    def start(self, n: int | str) -> None:
        def call() -> None:
            try:
                self.outcomes[n] = self.combiner.insert(row(n))
            except BaseException as exc:
                self.outcomes[n] = exc

        thread = threading.Thread(target=call)
        thread.start()
        self.threads.append(thread)

    def join(self) -> None:
        for thread in self.threads:
            thread.join(30)


def blocked_first_leader(dsn: str, conn, combiner, callers: Callers, queued: list):
    """Lock the table, start caller 'first' (it leads and blocks), then queue ``queued``
    behind it; returns the locking connection (roll it back to release)."""
    locker = psycopg.connect(dsn)
    locker.execute("LOCK TABLE supervisor.jobs IN ACCESS EXCLUSIVE MODE")
    callers.start("first")
    wait_for(lambda: conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
        "AND application_name = 'supervisor-enqueue'").fetchone()[0] == 1,
        what="the first leader to block on the lock")
    for n in queued:
        callers.start(n)
    wait_for(lambda: len(combiner._waiting) == len(queued), what="callers to queue")
    return locker


def test_waiting_callers_share_one_statement_and_each_gets_its_own_id(dsn, conn):
    combiner = combine.Combiner(producer_pool(dsn), max_leaders=1)
    callers = Callers(combiner)
    locker = blocked_first_leader(dsn, conn, combiner, callers, list(range(6)))
    locker.rollback()
    callers.join()
    locker.close()
    assert combiner.batches == 2  # the first alone, then all six together
    stored = dict(conn.execute("SELECT id, args->'n' FROM supervisor.jobs").fetchall())
    assert {stored[job_id] for job_id in callers.outcomes.values()} == {"first", *range(6)}
    assert len(stored) == 7
    producer_pool(dsn).close()


def test_one_bad_job_fails_alone_and_the_rest_of_its_batch_is_stored(dsn, conn):
    conn.execute("ALTER TABLE supervisor.jobs ADD CONSTRAINT not_13 CHECK (args->>'n' <> '13')")
    combiner = combine.Combiner(producer_pool(dsn), max_leaders=1)
    callers = Callers(combiner)
    locker = blocked_first_leader(dsn, conn, combiner, callers, [11, 12, 13, 14])
    locker.rollback()
    callers.join()
    locker.close()
    assert isinstance(callers.outcomes[13], psycopg.errors.CheckViolation)
    assert combiner.batches == 1 + 1 + 4  # 'first'; the shared one that failed; one by one
    stored = dict(conn.execute("SELECT id, (args->>'n') FROM supervisor.jobs").fetchall())
    assert sorted(stored.values()) == ["11", "12", "14", "first"]
    for n in (11, 12, 14):
        assert stored[callers.outcomes[n]] == str(n)
    producer_pool(dsn).close()


def test_connection_lost_under_a_batch_fails_every_caller_in_it_and_stores_none(dsn, conn):
    combiner = combine.Combiner(producer_pool(dsn), max_leaders=1)
    combiner.insert(row("warm"))  # one pooled connection, the one every batch uses
    [cur] = producer_pool(dsn)._idle
    backend = cur.connection.info.backend_pid
    callers = Callers(combiner)
    locker = blocked_first_leader(dsn, conn, combiner, callers, [1, 2, 3])
    conn.execute("SELECT pg_terminate_backend(%s)", (backend,))  # under 'first'
    wait_for(lambda: isinstance(callers.outcomes.get("first"), BaseException),
             what="the first leader to see its connection lost")
    # The next leader's batch [1, 2, 3] runs on a fresh connection: kill that one too.
    wait_for(lambda: conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
        "AND application_name = 'supervisor-enqueue'").fetchone()[0] == 1,
        what="the second batch to block")
    conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                 "WHERE wait_event_type = 'Lock' AND application_name = 'supervisor-enqueue'")
    callers.join()
    locker.rollback()
    locker.close()
    for n in ("first", 1, 2, 3):
        error = callers.outcomes[n]
        assert isinstance(error, DatabaseUnavailable), error
        assert "not confirmed" in str(error) and "\n" not in str(error)
    assert conn.execute("SELECT args->>'n' FROM supervisor.jobs").fetchall() == [("warm",)]
    producer_pool(dsn).close()


def test_async_leader_cancelled_mid_send_does_not_fail_its_batch(dsn, conn):
    import asyncio

    from shared.producers.aio import AsyncCombiner, _drive_once
    from shared.producers.aio_pool import async_producer_pool

    async def main():
        pool = async_producer_pool(dsn)
        combiner = AsyncCombiner(pool, _drive_once, max_leaders=1)
        with psycopg.connect(dsn) as locker:
            locker.execute("LOCK TABLE supervisor.jobs IN ACCESS EXCLUSIVE MODE")
            leader = asyncio.ensure_future(combiner.insert(row("leader")))
            while conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type"
                               " = 'Lock' AND application_name = 'supervisor-enqueue'"
                               ).fetchone()[0] != 1:
                await asyncio.sleep(0.005)  # poll the server, with the loop free to run
            followers = [asyncio.ensure_future(combiner.insert(row(n))) for n in (1, 2)]
            while len(combiner._waiting) != 2:
                await asyncio.sleep(0.005)
            leader.cancel()
            with pytest.raises(asyncio.CancelledError):
                await leader
            locker.rollback()
        ids = await asyncio.gather(*followers)
        pool.close()
        return ids, combiner.batches

    ids, batches = asyncio.run(main())
    stored = dict(conn.execute("SELECT id, args->>'n' FROM supervisor.jobs").fetchall())
    assert [stored[i] for i in ids] == ["1", "2"]
    assert "leader" in stored.values()  # its send was shielded: it finished after all
    assert batches == 2
