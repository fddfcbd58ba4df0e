"""Maintenance statements against a real database: the prune stays on its index."""

import pytest

from shared.enqueue import enqueue_many
from supervisor.db.sql import PRUNE


@pytest.mark.slow
def test_prune_reads_the_finished_index_not_the_table(conn):
    enqueue_many("k", [{"i": i} for i in range(20_000)], conn=conn)
    conn.execute("UPDATE supervisor.jobs SET state = 'completed', "
                 "finished_at = now() - (id % 100) * interval '1 day' WHERE id % 4 <> 0")
    conn.execute("ANALYZE supervisor.jobs")
    plan = "\n".join(row[0] for row in conn.execute(
        "EXPLAIN " + PRUNE, {"retention": 99 * 86400.0, "discarded": 99 * 86400.0,
                             "batch": 1000}))
    assert "jobs_finished_idx" in plan, plan
    assert "Seq Scan on jobs" not in plan, plan
    deleted = conn.execute(PRUNE, {"retention": 98.5 * 86400.0, "discarded": 98.5 * 86400.0,
                                   "batch": 1000}).rowcount
    assert deleted == 200  # ids ending in 99: finished 99 days ago; younger rows stay
    assert conn.execute("SELECT count(*) FROM supervisor.jobs").fetchone()[0] == 19_800


def test_discarded_jobs_outlive_completed_ones(conn):
    from supervisor.db import Prune, Store

    ids = enqueue_many("k", [{"i": i} for i in range(4)], conn=conn)
    conn.execute("UPDATE supervisor.jobs SET finished_at = now() - interval '10 days', "
                 "state = CASE WHEN id % 2 = 0 THEN 'discarded' ELSE 'completed' END")
    pruned = Store(conn, "me").prune(Prune(retention=7 * 86400.0, discarded=30 * 86400.0,
                                            batch=100))
    left = conn.execute("SELECT state, count(*) FROM supervisor.jobs GROUP BY 1").fetchall()
    assert pruned == 2 and left == [("discarded", 2)], (ids, left)


def test_batch_rows_are_pruned_with_their_members_and_callback(conn):
    from shared.batches import Callback
    from supervisor.db import Prune, PruneBatches, Store

    store = Store(conn, "me")
    old = enqueue_many("k", [{}, {}], then=Callback("cb", {}), conn=conn)
    young = enqueue_many("k", [{}], then=Callback("cb", {}), conn=conn)
    still_open = enqueue_many("k", [{}, {}], then=Callback("cb", {}), conn=conn)
    conn.execute("UPDATE supervisor.jobs SET state = 'completed', finished_at = now() "
                 "WHERE batch_id = ANY(%s)", ([old.id, young.id],))
    conn.execute("UPDATE supervisor.jobs SET state = 'completed', finished_at = now() "
                 "WHERE id = %s", (still_open.ids[0],))
    conn.execute("UPDATE supervisor.batches SET finished_at = now() - interval '10 days' "
                 "WHERE id = %s", (old.id,))
    conn.execute("UPDATE supervisor.jobs SET state = 'completed' WHERE kind = 'cb'")
    conn.execute("UPDATE supervisor.jobs SET finished_at = now() - interval '10 days' "
                 "WHERE state = 'completed'")
    week = 7 * 86400.0
    # Members and callbacks still there: no batch row goes before them.
    assert store.prune_batches(PruneBatches(week, 100)) == 0
    store.prune(Prune(week, week, 100))
    assert conn.execute("SELECT count(*) FROM supervisor.jobs").fetchone()[0] == 1  # open one
    # The old batch's members and callback are gone: its row goes; the young batch (its
    # row finished now) and the open batch (a member left) stay.
    assert store.prune_batches(PruneBatches(week, 100)) == 1
    left = [r[0] for r in conn.execute("SELECT id FROM supervisor.batches ORDER BY id")]
    assert left == [young.id, still_open.id]
