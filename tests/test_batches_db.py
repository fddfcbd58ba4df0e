"""Batches and dependencies against real PostgreSQL, with completions written by plain
UPDATEs (the trigger of schema 0006 reacts to any writer, the parent's or anyone's)."""

import threading

import psycopg
import pytest

from shared.batches import Batch, Callback, find_batch
from shared.enqueue import enqueue, enqueue_many

pytestmark = [pytest.mark.timeout(60), pytest.mark.slow]  # many databases: CI lane

CB = Callback("bt_callback", {"tag": "x"}, queue="bt")


def finish(conn, ids, state="completed"):
    conn.execute("UPDATE supervisor.jobs SET state = %s, finished_at = now() "
                 "WHERE id = ANY(%s)", (state, list(ids)))


def callbacks(conn):
    return conn.execute("SELECT id, args FROM supervisor.jobs WHERE kind = 'bt_callback'"
                        ).fetchall()


def test_batch_is_stored_in_one_go_and_closes_at_its_last_member(conn, dsn):
    batch = enqueue_many("bt_member", [{"n": i} for i in range(5)], queue="bt", then=CB,
                         dsn=dsn)
    assert isinstance(batch, Batch) and len(batch.ids) == 5
    assert {r[0] for r in conn.execute("SELECT batch_id FROM supervisor.jobs "
                                       "WHERE id = ANY(%s)", (batch.ids,))} == {batch.id}
    finish(conn, batch.ids[:4])
    assert callbacks(conn) == []
    assert not batch.summary().finished
    finish(conn, batch.ids[4:])
    [(cb_id, args)] = callbacks(conn)
    assert args == {"tag": "x"}
    s = batch.summary()
    assert (s.total, s.completed, s.callback_id, s.finished) == (5, 5, cb_id, True)
    assert find_batch(batch.id, dsn=dsn).ids == batch.ids


def test_discarded_and_cancelled_members_still_close_the_batch(conn, dsn):
    batch = enqueue_many("bt_member", [{}, {}, {}], queue="bt", then=CB, dsn=dsn)
    finish(conn, batch.ids[:1], "discarded")
    finish(conn, batch.ids[1:2], "cancelled")
    assert callbacks(conn) == []
    finish(conn, batch.ids[2:])
    assert len(callbacks(conn)) == 1
    s = batch.summary()
    assert (s.completed, s.discarded, s.cancelled) == (1, 1, 1)


def test_retryable_is_not_final_and_a_second_update_adds_no_callback(conn, dsn):
    batch = enqueue_many("bt_member", [{}, {}], queue="bt", then=CB, dsn=dsn)
    finish(conn, batch.ids[:1])
    finish(conn, batch.ids[1:], "retryable")
    assert callbacks(conn) == []
    finish(conn, batch.ids[1:])
    finish(conn, batch.ids, "discarded")  # final to final: not a new closing
    assert len(callbacks(conn)) == 1


def test_the_last_two_members_finishing_at_once_enqueue_one_callback(conn, dsn):
    """Each of two transactions finishes one of the last two members; neither has
    committed when the other looks. Without the batch lock both see the other's member
    unfinished and no callback is ever enqueued."""
    batch = enqueue_many("bt_member", [{}, {}], queue="bt", then=CB, dsn=dsn)
    first = psycopg.connect(dsn)
    second = psycopg.connect(dsn)
    try:
        finish(first, batch.ids[:1])  # open transaction: the trigger ran, no commit yet
        done = threading.Event()

        def other():
            finish(second, batch.ids[1:])  # blocks on the batch lock until first commits
            second.commit()
            done.set()

        worker = threading.Thread(target=other)
        worker.start()
        assert not done.wait(0.5)  # the second waits for the first: the lock is real
        first.commit()
        worker.join(10)
        assert done.is_set()
    finally:
        first.close()
        second.close()
    assert len(callbacks(conn)) == 1


def test_batches_of_two_parallel_writers_close_once_each(dsn):
    """Many small batches finished by two connections in interleaved statements."""
    made = [enqueue_many("bt_member", [{}] * 4, queue="bt", then=CB, dsn=dsn)
            for _ in range(30)]
    halves = ([i for b in made for i in b.ids[::2]], [i for b in made for i in b.ids[1::2]])

    def writer(ids):
        with psycopg.connect(dsn, autocommit=True) as c:
            for k in range(0, len(ids), 7):
                finish(c, ids[k:k + 7])

    threads = [threading.Thread(target=writer, args=(h,)) for h in halves]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    with psycopg.connect(dsn, autocommit=True) as c:
        assert len(callbacks(c)) == 30
        assert c.execute("SELECT count(*) FROM supervisor.batches WHERE callback_id IS NULL"
                         ).fetchone()[0] == 0


def test_bad_batches_are_refused_before_the_database(conn, dsn):
    with pytest.raises(ValueError, match="at least one job"):
        enqueue_many("bt_member", [], then=CB, dsn=dsn)
    with pytest.raises(TypeError, match="bind"):
        enqueue_many("bt_member", [{}], then="cb", dsn=dsn)
    with pytest.raises(ValueError, match="unique keys"):
        enqueue_many("bt_member", [{}], then=CB, unique_keys=["k"], dsn=dsn)
    with pytest.raises(TypeError):
        enqueue_many("bt_member", [{}], then=Callback("bt_callback", {"x": object()}), dsn=dsn)
    assert conn.execute("SELECT count(*) FROM supervisor.batches").fetchone()[0] == 0


def test_plain_jobs_leave_no_trace_and_a_plain_id_list_comes_back(conn, dsn):
    ids = enqueue_many("bt_member", [{}, {}], queue="bt", dsn=dsn)
    assert isinstance(ids, list)
    one = enqueue("bt_member", {}, queue="bt", dsn=dsn)
    finish(conn, [*ids, one])
    assert conn.execute("SELECT count(*) FROM supervisor.batches").fetchone()[0] == 0


def test_results_stream_through_a_server_side_cursor(conn, dsn):
    from shared.batches import iter_results

    batch = enqueue_many("bt_member", [{"n": i} for i in range(50)], queue="bt", then=CB,
                         dsn=dsn)
    conn.execute("UPDATE supervisor.jobs SET state = 'completed', finished_at = now(), "
                 "result = args->'n' WHERE batch_id = %s", (batch.id,))
    with psycopg.connect(dsn, autocommit=True) as reader:
        members = iter_results(reader, batch.id, chunk=10)
        first = next(members)
        open_cursors = reader.execute("SELECT name FROM pg_cursors").fetchall()
        rest = list(members)
    assert open_cursors == [(f"batch_results_{batch.id}",)]
    assert [m.result for m in [first, *rest]] == list(range(50))
    assert {m.state for m in rest} == {"completed"}
