"""Issue 28 under a real supervisor: short jobs queued in a child's pipe behind a job
that turns out long are recalled and run on the other child while the long one still
runs (each exactly once, by the handlers' own records); jobs that expire are never
started, whether the claim passes over them or they expired while queued in a pipe."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from e2e import Supervisor, read_log, run_burst, wait_until

from shared.enqueue import enqueue, enqueue_many

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def test_short_jobs_behind_a_long_one_run_on_the_other_child_meanwhile(dsn, tmp_path):
    # --prefetch 8: each child's pipe holds the running job and seven behind it. The
    # long job comes first, so the first child holds it and seven short ones.
    with psycopg.connect(dsn, autocommit=True) as conn:
        (long_id,) = enqueue_many("e2e_sleep", [{"seconds": 4.0}], conn=conn, max_attempts=1)
        shorts = enqueue_many("e2e_sleep", [{"seconds": 0.002}] * 40, conn=conn,
                              max_attempts=1)
    log = tmp_path / "run.log"
    sup = run_burst(dsn, "-n", "2", "--prefetch", "8", log_path=log)
    records = read_log(log)
    starts = [r for r in records if r["event"] == "start"]
    assert sorted(r["id"] for r in starts) == sorted([long_id, *shorts])  # each once
    (long_start,) = [r for r in starts if r["id"] == long_id]
    (long_end,) = [r for r in records if r["event"] == "end" and r["id"] == long_id]
    short_ends = [r for r in records if r["event"] == "end" and r["id"] != long_id]
    # None waited for the long job: all ran on the other child before it ended.
    assert all(r["pid"] != long_start["pid"] for r in short_ends), sup.err[-2000:]
    assert max(r["t"] for r in short_ends) < long_end["t"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        states = conn.execute("SELECT state, attempt, count(*) FROM supervisor.jobs "
                              "GROUP BY 1, 2").fetchall()
    assert states == [("completed", 1, 41)]


def test_jobs_that_expired_while_queued_in_a_childs_pipe_never_start(dsn, tmp_path):
    # One child, a pipe of 8: the short jobs are claimed into the pipe behind a running
    # job, expire there, and the child passes over them when their turn comes. The two
    # 3 s jobs first make 3 s the kind's p95, so the 2.5 s one does not overrun and
    # what is queued behind it stays there (no recall).
    log = tmp_path / "run.log"
    sup = Supervisor(dsn, "-n", "1", "--prefetch", "8", log_path=log)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            *_, long_id = enqueue_many("e2e_sleep", [{"seconds": 3.0}] * 2
                                       + [{"seconds": 2.5}], conn=conn)
            wait_until(lambda: any(r["id"] == long_id for r in read_log(log)), timeout=30,
                       what="the last long job's start")
            doomed = enqueue_many("e2e_noop", [{}] * 5, conn=conn, expires_in=1.0)
            wait_until(lambda: conn.execute(
                "SELECT count(*) FROM supervisor.jobs WHERE id = ANY(%s) AND state = "
                "'expired'", (doomed,)).fetchone()[0] == 5, timeout=60, what="expired")
            rows = conn.execute("SELECT attempt, finished_at IS NOT NULL, lease_owner "
                                "FROM supervisor.jobs WHERE id = ANY(%s)", (doomed,)).fetchall()
        assert rows == [(0, True, None)] * 5
        assert not [r for r in read_log(log) if r["id"] in doomed]  # never started
        # They were in the pipe (the child answered for them), not passed over by a claim.
        wait_until(lambda: all(f"job {i} e2e_noop expired before it started" in sup.err
                               for i in doomed), timeout=10, what="the reporter's lines")
    finally:
        sup.stop()


def test_a_job_past_its_expiry_is_never_claimed_and_ends_expired(dsn, tmp_path):
    with psycopg.connect(dsn, autocommit=True) as conn:
        soon = enqueue("e2e_noop", {}, conn=conn,
                       expires_at=datetime.now(UTC) + timedelta(seconds=0.3))
        later = enqueue("e2e_noop", {}, conn=conn, expires_in=600)
        plain = enqueue("e2e_noop", {}, conn=conn)
        # A plain-SQL producer sets the column itself.
        (sql_id,) = conn.execute("INSERT INTO supervisor.jobs (kind, expires_at) VALUES "
                                 "('e2e_noop', now() + interval '0.3 s') RETURNING id"
                                 ).fetchone()
        wait_until(lambda: conn.execute("SELECT now() > max(expires_at) + interval '0.1 s' "
                                        "FROM supervisor.jobs WHERE id IN (%s, %s)",
                                        (soon, sql_id)).fetchone()[0], what="expiry")
    log = tmp_path / "run.log"
    run_burst(dsn, "-n", "1", log_path=log)
    ran = sorted(r["id"] for r in read_log(log))
    assert ran == sorted([later, plain])
    with psycopg.connect(dsn, autocommit=True) as conn:
        wait_until(lambda: conn.execute("SELECT count(*) FROM supervisor.jobs WHERE state = "
                                        "'expired'").fetchone()[0] == 2, timeout=30,
                   what="the maintenance sweep")
        states = dict(conn.execute("SELECT id, state FROM supervisor.jobs").fetchall())
    assert states == {soon: "expired", sql_id: "expired", later: "completed",
                      plain: "completed"}
