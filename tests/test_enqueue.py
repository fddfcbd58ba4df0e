"""enqueue / enqueue_many against real PostgreSQL, and the NOTIFY triggers."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from shared.db import SchemaMissing, UnusableConnection
from shared.enqueue import enqueue, enqueue_many
from shared.producers.pool import producer_pool
from supervisor.db.store import Completion, Store

pytestmark = pytest.mark.timeout(60)

UNREACHABLE = "postgresql://nobody:secret@127.0.0.1:1/nowhere"


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: enqueue("", {}), TypeError, "kind"),
    (lambda: enqueue("k", [1, 2]), TypeError, "must be a dict"),
    (lambda: enqueue("k", {1: "x"}), TypeError, "str keys"),
    (lambda: enqueue("k", {"f": object()}), TypeError, "not JSON-encodable"),
    (lambda: enqueue("k", {"s": "a\x00b"}), ValueError, "NUL"),
    (lambda: enqueue("k", {}, priority="1"), TypeError, "priority"),
    (lambda: enqueue("k", {}, max_attempts=0), ValueError, "max_attempts"),
    (lambda: enqueue("k", {}, delay=-1), ValueError, "delay"),
    (lambda: enqueue("k", {}, timeout=0), ValueError, "timeout"),
    (lambda: enqueue("k", {}, queue=""), ValueError, "queue"),
    (lambda: enqueue("k", {}, delay=1, run_at=datetime.now(UTC)), ValueError, "not both"),
    (lambda: enqueue("k", {}, run_at=datetime.now()), ValueError, "timezone"),
    (lambda: enqueue_many("k", [{}, "x"]), TypeError, "must be a dict"),
    (lambda: enqueue_many("k", [{}, {}], unique_key="u"), ValueError, "unique_keys"),
    (lambda: enqueue_many("k", [{}], unique_keys=["a", "b"]), ValueError, "entries"),
])
def test_bad_input_is_rejected_before_the_database_is_touched(call, error, match, monkeypatch):
    # An unreachable DSN: touching the database would raise DatabaseUnavailable instead.
    monkeypatch.setenv("SUPERVISOR_DSN", UNREACHABLE)
    with pytest.raises(error, match=match):
        call()


def test_enqueue_stores_the_options(conn):
    job_id = enqueue("resize", {"path": "a.png"}, queue="images", priority=2, max_attempts=4,
                     timeout=3.5, conn=conn)
    row = conn.execute("SELECT kind, queue, args, state, priority, max_attempts, timeout "
                       "FROM supervisor.jobs WHERE id = %s", (job_id,)).fetchone()
    assert row == ("resize", "images", {"path": "a.png"}, "available", 2, 4, 3.5)


def test_delay_and_run_at_decide_between_scheduled_and_available(conn):
    delayed = enqueue("k", delay=60, conn=conn)
    past = enqueue("k", run_at=datetime.now(UTC) - timedelta(hours=1), conn=conn)
    many = enqueue_many("k", [{}, {}], delay=60, conn=conn)
    states = dict(conn.execute("SELECT id, state FROM supervisor.jobs").fetchall())
    assert states == {delayed: "scheduled", past: "available", many[0]: "scheduled",
                      many[1]: "scheduled"}


def test_enqueue_many_returns_ids_in_order_and_keeps_odd_text(conn):
    odd = ["tab\there", "back\\slash", "new\nline", "é ☃ 𝄞", '"quoted"', "\\N"]
    ids = enqueue_many("k\\ind", [{"s": s, "i": i} for i, s in enumerate(odd)],
                       queue="q\\1", timeout=2.0, conn=conn)
    rows = conn.execute("SELECT id, kind, queue, args, timeout FROM supervisor.jobs "
                        "ORDER BY id").fetchall()
    assert [r[0] for r in rows] == ids
    assert [r[3] for r in rows] == [{"s": s, "i": i} for i, s in enumerate(odd)]
    assert {(r[1], r[2], r[4]) for r in rows} == {("k\\ind", "q\\1", 2.0)}
    assert enqueue_many("k", [], conn=conn) == []


def test_unique_key_dedupes_while_live_and_frees_up_when_finished(conn):
    first = enqueue("k", {"n": 1}, unique_key="report-7", conn=conn)
    assert enqueue("k", {"n": 2}, unique_key="report-7", conn=conn) == first
    batch = enqueue_many("k", [{}, {}, {}], unique_keys=["report-7", "other", "other"],
                         conn=conn)
    assert batch[0] == first and batch[1] == batch[2] != first
    store = Store(conn, "me")
    [job] = [j for j in store.claim("default", ["k"], 10) if j.id == first]
    assert enqueue("k", unique_key="report-7", conn=conn) == first  # running still holds it
    store.complete([Completion(job.id, job.attempt, None)])
    second = enqueue("k", unique_key="report-7", conn=conn)
    assert second != first
    assert conn.execute("SELECT count(*) FROM supervisor.jobs WHERE unique_key = 'report-7'"
                        ).fetchone() == (2,)


def test_caller_transaction_rollback_hides_the_job_and_commit_shows_it(dsn, conn):
    with psycopg.connect(dsn) as caller:  # not autocommit: a transaction is open
        rolled_back = enqueue("k", conn=caller)
        enqueue_many("k", [{}, {}], conn=caller)
        caller.rollback()
        committed = enqueue("k", conn=caller)
        assert conn.execute("SELECT count(*) FROM supervisor.jobs").fetchone() == (0,)
        caller.commit()
    ids = [r[0] for r in conn.execute("SELECT id FROM supervisor.jobs")]
    assert ids == [committed] and rolled_back not in ids


def test_pooled_connection_is_reused_per_process(dsn):
    a = enqueue("k", dsn=dsn)
    b = enqueue("k", dsn=dsn)
    assert b > a
    pool = producer_pool(dsn)
    assert pool.pid == os.getpid() and pool.opened == 1
    [idle] = pool._idle
    assert idle.connection.autocommit
    pool.close()  # the test database is dropped after the test
    assert pool.opened == 0


def test_missing_schema_is_a_clear_error(fresh_dsn):
    with psycopg.connect(fresh_dsn, autocommit=True) as conn, \
            pytest.raises(SchemaMissing, match="supervisor migrate"):
        enqueue("k", conn=conn)


def _notifications(listener) -> list[str]:
    return [n.payload for n in listener.notifies(timeout=0.2, stop_after=None)
            if n.channel == "supervisor_jobs"]


def test_plain_sql_insert_notifies_at_commit(dsn):
    with psycopg.connect(dsn, autocommit=True) as listener, psycopg.connect(dsn) as producer:
        listener.execute("LISTEN supervisor_jobs")
        producer.execute("INSERT INTO supervisor.jobs (kind, queue) VALUES ('k', 'mail')")
        assert _notifications(listener) == []  # not before commit
        producer.commit()
        assert _notifications(listener) == ["mail"]


def test_bulk_insert_notifies_once_per_queue(dsn):
    with psycopg.connect(dsn, autocommit=True) as listener, psycopg.connect(dsn) as producer:
        listener.execute("LISTEN supervisor_jobs")
        enqueue_many("k", [{}] * 1000, queue="a", conn=producer)
        enqueue_many("k", [{}] * 10, queue="b", conn=producer)
        enqueue_many("k", [{}] * 10, queue="c", delay=60, conn=producer)  # scheduled: quiet
        producer.commit()
        assert sorted(_notifications(listener)) == ["a", "b"]


def test_promotion_notifies(dsn, conn):
    with psycopg.connect(dsn, autocommit=True) as listener:
        job_id = enqueue("k", queue="later", delay=3600, conn=conn)
        listener.execute("LISTEN supervisor_jobs")
        conn.execute("UPDATE supervisor.jobs SET run_at = now() WHERE id = %s", (job_id,))
        assert _notifications(listener) == []
        assert Store(conn, "me").promote_due() == 1
        assert _notifications(listener) == ["later"]


def test_unsupported_closed_and_failed_connections_are_one_line_errors(dsn, conn):
    with pytest.raises(TypeError, match=r"conn must be a psycopg Connection.*not builtins\.dict"):
        enqueue("k", conn={"not": "a connection"})
    with pytest.raises(TypeError, match="conn must be"):
        enqueue_many("k", [], conn=object())
    caller = psycopg.connect(dsn)
    enqueue("k", {"lost": 1}, conn=caller)
    with pytest.raises(psycopg.errors.DivisionByZero):
        caller.execute("SELECT 1/0")
    for call in (lambda: enqueue("k", conn=caller), lambda: enqueue_many("k", [{}], conn=caller)):
        with pytest.raises(UnusableConnection, match=r"failed transaction.*roll it back") as err:
            call()
        assert "\n" not in str(err.value)
    caller.rollback()
    caller.close()
    with pytest.raises(UnusableConnection, match="conn is closed"):
        enqueue("k", conn=caller)
    assert conn.execute("SELECT count(*) FROM supervisor.jobs").fetchone() == (0,)


def test_async_connection_given_to_the_sync_api_is_refused(dsn):
    import asyncio

    async def main():
        async with await psycopg.AsyncConnection.connect(dsn) as caller:
            with pytest.raises(TypeError, match="async connection: use enqueue_async"):
                enqueue("k", conn=caller)

    asyncio.run(main())



@pytest.mark.parametrize("value", ["abc", "0", "-3"])
def test_a_bad_pool_size_setting_is_one_line(value, monkeypatch):
    from shared.producers.pool import ENV_POOL_SIZE, pool_size

    monkeypatch.setenv(ENV_POOL_SIZE, value)
    with pytest.raises(ValueError, match=f"{ENV_POOL_SIZE} must be an int of at least 1"):
        pool_size()
