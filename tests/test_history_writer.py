"""The per-minute history is written beside the loop (``supervisor.db.HistoryWriter``).

A real supervisor whose roll-up is held up (another session holds a lock on
``supervisor.job_minutes``, so the statement waits) keeps claiming and completing jobs
the whole time, and a SIGTERM drain ends within its grace and the database deadline;
the statement it left behind commits whole or not at all, so the rollup still agrees
with the jobs. Before, the roll-up ran in the leader's loop: the loop waited as long as
the statement did, and no job was claimed or completed meanwhile.

The writer alone, on a real database and a selector driven by the test: a round rolls
up and samples (falling back to the careful reading of a hand-written usage), a
statement the server does not answer within the deadline is abandoned and the next
round connects again, and a depth count cancelled at its timeout is not tried again
before the next minute.
"""

from __future__ import annotations

import selectors
import signal
import time
from pathlib import Path

import psycopg
import pytest
from e2e import Supervisor, wait_until
from history_helpers import roll_up_to_now

from shared.enqueue import enqueue_many
from supervisor.db import HistoryWriter
from supervisor.engine.maintenance import Maintenance, MaintenanceSettings

pytestmark = pytest.mark.timeout(120)

# The roll-up's backend, waiting for a lock (whichever connection it runs on; the text
# shown is cut at track_activity_query_size, so either name may be past it).
_ROLL_UP_WAITING = """
SELECT pid, query_start FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock'
  AND (query LIKE '%rollup_mark%' OR query LIKE '%job_minutes%')
"""
_FINISHED = "('completed', 'discarded', 'cancelled')"
_TABLE = f"""
SELECT date_trunc('minute', finished_at), queue, kind, count(*)
FROM supervisor.jobs WHERE state IN {_FINISHED} GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
"""
_ROLLED = """
SELECT minute, queue, kind, sum(completed + discarded + cancelled)::bigint
FROM supervisor.job_minutes GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
"""


def _completed(conn: psycopg.Connection, ids: list[int]) -> int:
    return conn.execute("SELECT count(*) FROM supervisor.jobs WHERE id = ANY(%s) "
                        "AND state = 'completed'", (ids,)).fetchone()[0]


@pytest.mark.slow
def test_a_held_up_roll_up_never_stalls_claims_nor_the_drain(dsn, conn, tmp_path: Path):
    conn.execute("UPDATE supervisor.rollup_mark SET rolled_until = now() - interval '1 hour'")
    first = list(enqueue_many("e2e_noop", [{"n": i} for i in range(20)], conn=conn))
    grace, deadline = 3.0, 25.0
    config = tmp_path / "supervisor.toml"
    # Rounds every half second, and a statement may wait 20 s before the server gives up
    # on it: long enough to see whether anything else happens meanwhile.
    config.write_text(f"maintenance_interval = 0.5\nstatement_timeout = 20\n"
                      f"database_deadline = {deadline}\ngrace = {grace}\n")
    locker = psycopg.connect(dsn, autocommit=False)
    sup = Supervisor(dsn, "-n", "2", "--config", str(config))
    try:
        wait_until(lambda: _completed(conn, first) == len(first), timeout=30,
                   what="the first jobs done")
        locker.execute("LOCK TABLE supervisor.job_minutes IN ACCESS EXCLUSIVE MODE")
        waiting = wait_until(lambda: conn.execute(_ROLL_UP_WAITING).fetchone(), timeout=20,
                             what="the leader's roll-up waiting for the lock")
        # Jobs enqueued now are claimed, run and completed while the roll-up waits.
        ids = list(enqueue_many("e2e_noop", [{"n": i} for i in range(40)], conn=conn))
        wait_until(lambda: _completed(conn, ids) == len(ids), timeout=10,
                   what="jobs completed while the roll-up waits")
        assert conn.execute(_ROLL_UP_WAITING).fetchone() == waiting  # the same, waiting still
        sup.signal(signal.SIGTERM)
        assert sup.wait(timeout=grace + deadline) == 0, sup.err
        assert conn.execute(_ROLL_UP_WAITING).fetchone() == waiting  # abandoned, not awaited
    finally:
        sup.stop()
        locker.rollback()
        locker.close()
    # The statement left behind runs once the lock is gone, whole or not at all: rolled
    # up to the end, the rollup agrees with the jobs.
    wait_until(lambda: conn.execute(_ROLL_UP_WAITING).fetchone() is None, timeout=20,
               what="the abandoned roll-up to end")
    wait_until(lambda: not conn.execute(
        "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() "
        "AND application_name LIKE 'supervisor %% history'").fetchone(), timeout=20,
        what="the history connection to close")
    roll_up_to_now(conn)
    assert conn.execute(_ROLLED).fetchall() == conn.execute(_TABLE).fetchall()


def _drive(writer: HistoryWriter, selector: selectors.BaseSelector,
           timeout: float = 15.0) -> None:
    """Turn a loop as the supervisor's does until the writer's round has ended."""
    ends = time.monotonic() + timeout
    while writer.busy:
        assert time.monotonic() < ends, "the round did not end"
        for key, mask in selector.select(0.02):
            key.data.handle_event(key, mask)
        writer.tick(time.monotonic())


class _Wall:
    """A wall clock the test moves: the sample's minutes."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def _writer(dsn: str, selector: selectors.BaseSelector, *, deadline: float = 3.0,
            statement_timeout: float = 2.0, wall=time.time) -> HistoryWriter:
    return HistoryWriter(dsn, "supervisor test history", selector,
                         statement_timeout=statement_timeout, deadline=deadline, wall=wall,
                         lag=-120, slice_seconds=3600)


def test_a_round_rolls_up_and_samples_without_blocking(dsn, conn):
    conn.execute("UPDATE supervisor.rollup_mark SET rolled_until = "
                 "date_trunc('minute', now()) - interval '10 minutes'")
    conn.execute("INSERT INTO supervisor.jobs (kind, queue, state, attempt, finished_at, usage) "
                 "SELECT 'k', 'q', 'completed', 1, now() - interval '5 minutes', u::jsonb "
                 "FROM unnest(ARRAY['{\"cpu_seconds\": 0.5}', "
                 "'{\"cpu_seconds\": \"lots\"}']) AS u")  # written by hand: the careful reading
    enqueue_many("e2e_noop", [{}] * 3, queue="waiting", conn=conn)
    with selectors.DefaultSelector() as selector:
        writer = _writer(dsn, selector)
        assert writer.request()
        assert writer.busy  # sent (connecting first): the caller did not wait
        assert not writer.request()  # one round at a time
        _drive(writer, selector)
        writer.close()
    assert writer.last is not None and writer.last.errors == []
    assert writer.last.rolled == 1 and writer.last.sampled == 1
    assert conn.execute("SELECT completed, cpu_seconds FROM supervisor.job_minutes"
                        ).fetchall() == [(2, 0.5)]
    assert conn.execute("SELECT queue, available FROM supervisor.queue_minutes"
                        ).fetchall() == [("waiting", 3)]
    assert writer.skipped == 1


def test_an_unanswered_statement_is_abandoned_and_the_next_round_connects_again(dsn, conn):
    conn.execute("UPDATE supervisor.rollup_mark SET rolled_until = "
                 "date_trunc('minute', now()) - interval '10 minutes'")
    conn.execute("INSERT INTO supervisor.jobs (kind, queue, state, attempt, finished_at) "
                 "VALUES ('k', 'q', 'completed', 1, now() - interval '5 minutes')")
    locker = psycopg.connect(dsn, autocommit=False)
    locker.execute("LOCK TABLE supervisor.job_minutes IN ACCESS EXCLUSIVE MODE")
    with selectors.DefaultSelector() as selector:
        # No server-side timeout: only the client's deadline ends the wait.
        writer = _writer(dsn, selector, deadline=0.5, statement_timeout=0)
        try:
            writer.request()
            _drive(writer, selector)
            assert writer.last is not None
            assert any("DatabaseHung" in e for e in writer.last.errors), writer.last.errors
            assert writer.query is None and writer.next_deadline() is None  # closed
        finally:
            locker.rollback()
            locker.close()
        # The abandoned statement ends on the server (whole); the next round connects
        # again and finds nothing left to add.
        wait_until(lambda: conn.execute(_ROLL_UP_WAITING).fetchone() is None
                   and conn.execute("SELECT count(*) FROM pg_stat_activity WHERE "
                                    "application_name = 'supervisor test history'"
                                    ).fetchone()[0] == 0, what="the abandoned roll-up")
        writer.request()
        _drive(writer, selector)
        writer.close()
    assert writer.last.errors == []
    assert conn.execute("SELECT sum(completed) FROM supervisor.job_minutes").fetchone()[0] == 1


def test_a_cancelled_depth_count_is_not_tried_again_before_the_next_minute(dsn, conn):
    enqueue_many("e2e_noop", [{}] * 2, queue="waiting", conn=conn)
    wall = _Wall()
    wall.now = (wall.now // 60) * 60 + 10  # ten seconds into a minute
    locker = psycopg.connect(dsn, autocommit=False)
    locker.execute("LOCK TABLE supervisor.queue_minutes IN ACCESS EXCLUSIVE MODE")
    with selectors.DefaultSelector() as selector:
        writer = _writer(dsn, selector, wall=wall)
        try:
            writer.request()
            _drive(writer, selector)  # the count waits for the lock: cancelled at 250 ms
        finally:
            locker.rollback()
            locker.close()
        assert writer.last is not None and writer.last.sampled == 0
        assert writer.last.errors == []  # a cancelled count is no failure
        wall.now += 45  # the same minute: not counted again, though it could be now
        writer.request()
        _drive(writer, selector)
        assert writer.last.sampled == 0
        assert conn.execute("SELECT count(*) FROM supervisor.queue_minutes").fetchone()[0] == 0
        wall.now += 10  # the next minute
        writer.request()
        _drive(writer, selector)
        writer.close()
    assert writer.last.sampled == 1
    assert conn.execute("SELECT available FROM supervisor.queue_minutes").fetchall() == [(2,)]


def _sampled_once(dsn: str, conn, selector: selectors.BaseSelector
                  ) -> tuple[HistoryWriter, _Wall]:
    """A writer whose first round, ten seconds into a minute by its wall clock, sampled
    two waiting jobs; and that clock."""
    enqueue_many("e2e_noop", [{}] * 2, queue="waiting", conn=conn)
    wall = _Wall()
    wall.now = (wall.now // 60) * 60 + 10
    writer = _writer(dsn, selector, wall=wall)
    writer.request()
    _drive(writer, selector)
    assert writer.last is not None and writer.last.sampled == 1
    return writer, wall


def _round_after(seconds: float, writer: HistoryWriter, wall: _Wall,
                 selector: selectors.BaseSelector) -> bool:
    """Move the wall clock ``seconds`` on and run a round; whether it sent a sample (the
    connection is open: the roll-up goes at once, BEGIN, timeout, SAMPLE, COMMIT are
    queued behind it)."""
    wall.now += seconds
    writer.request()
    sent = len(writer.steps) == 4
    assert sent or writer.steps == [], writer.steps
    _drive(writer, selector)
    return sent


def test_a_written_sample_is_not_sent_again_before_the_next_minute(dsn, conn):
    with selectors.DefaultSelector() as selector:
        writer, wall = _sampled_once(dsn, conn, selector)
        # The same minute: its sample is written, only the roll-up is sent.
        assert not _round_after(45, writer, wall, selector)
        assert writer.last.errors == [] and writer.last.sampled == 0
        # The next minute (by the writer's clock; the server's may still be the same,
        # so what the sample writes is not checked).
        assert _round_after(10, writer, wall, selector)
        writer.close()
    assert writer.last.errors == []


def test_while_the_horizon_is_held_the_depth_sample_is_spaced_by_the_hold(dsn, conn):
    # Under a held horizon each sample walks every entry the hold kept in the indexes of
    # available and running jobs: one a minute through a 10-minute hold at 1,000 jobs/s,
    # and the claim index was read 6.0 entries per job claimed against 1.1 before it
    # (the 6-cycle run of 2026-12-07).
    # The maintenance spaces the samples as it spaces its other passes from an index's
    # start, and a minute each again once the hold lets go.
    with selectors.DefaultSelector() as selector:
        writer, wall = _sampled_once(dsn, conn, selector)
        maintenance = Maintenance(["waiting"], MaintenanceSettings(), history=writer)
        maintenance.horizon_held(60.0)  # held a minute: four minutes between samples
        sent = [_round_after(60, writer, wall, selector) for _ in range(4)]
        assert sent == [False, False, False, True]
        maintenance.horizon_held(0.0)  # let go: a sample each minute again
        assert _round_after(60, writer, wall, selector)
        writer.close()
    assert writer.last.errors == []
