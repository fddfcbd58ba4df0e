"""Maintenance statements against a real database: the prune stays on its index, and
the rescue and the prune from their floors read none of what a held snapshot keeps."""

import pytest

from shared.enqueue import enqueue_many
from supervisor.db.sql import PRUNE_DISCARDED, PRUNE_DONE


@pytest.mark.slow
def test_prune_reads_the_finished_index_not_the_table(conn):
    enqueue_many("k", [{"i": i} for i in range(20_000)], conn=conn)
    conn.execute("UPDATE supervisor.jobs SET state = 'completed', "
                 "finished_at = now() - (id % 100) * interval '1 day' WHERE id % 4 <> 0")
    conn.execute("ANALYZE supervisor.jobs")
    for statement in (PRUNE_DONE, PRUNE_DISCARDED):
        for floor in (float("-inf"), 1.7e9):
            plan = "\n".join(row[0] for row in conn.execute(
                "EXPLAIN " + statement, {"age": 99 * 86400.0, "batch": 1000, "floor": floor}))
            assert "jobs_finished_idx" in plan, plan
            assert "Seq Scan on jobs" not in plan, plan
    deleted = conn.execute(PRUNE_DONE, {"age": 98.5 * 86400.0, "batch": 1000,
                                        "floor": float("-inf")}).rowcount
    assert deleted == 200  # ids ending in 99: finished 99 days ago; younger rows stay
    assert conn.execute("SELECT count(*) FROM supervisor.jobs").fetchone()[0] == 19_800


def test_discarded_jobs_outlive_completed_ones(conn):
    from supervisor.db import Prune, Store

    ids = enqueue_many("k", [{"i": i} for i in range(4)], conn=conn)
    conn.execute("UPDATE supervisor.jobs SET finished_at = now() - interval '10 days', "
                 "state = CASE WHEN id % 2 = 0 THEN 'discarded' ELSE 'completed' END")
    store = Store(conn, "me")
    pruned = store.prune(Prune(done=True, age=7 * 86400.0, batch=100))
    pruned += store.prune(Prune(done=False, age=30 * 86400.0, batch=100))
    left = conn.execute("SELECT state, count(*) FROM supervisor.jobs GROUP BY 1").fetchall()
    assert pruned == 2 and left == [("discarded", 2)], (ids, left)


def test_completed_jobs_keep_their_retention_when_discarded_ones_have_a_shorter_one(conn):
    """Each kind of end at its own age: a shorter discarded retention prunes discarded
    jobs sooner and never completed ones (one statement for both once cut every finished
    job at the shorter of the two)."""
    from supervisor.db import Prune, Store

    enqueue_many("k", [{"i": i} for i in range(4)], conn=conn)
    conn.execute("UPDATE supervisor.jobs SET finished_at = now() - interval '5 days', "
                 "state = CASE WHEN id % 2 = 0 THEN 'discarded' ELSE 'completed' END")
    store = Store(conn, "me")
    assert store.prune(Prune(done=True, age=7 * 86400.0, batch=100)) == 0
    assert store.prune(Prune(done=False, age=3 * 86400.0, batch=100)) == 2
    left = conn.execute("SELECT state, count(*) FROM supervisor.jobs GROUP BY 1").fetchall()
    assert left == [("completed", 2)]


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
    store.prune(Prune(True, week, 100))
    assert conn.execute("SELECT count(*) FROM supervisor.jobs").fetchone()[0] == 1  # open one
    # The old batch's members and callback are gone: its row goes; the young batch (its
    # row finished now) and the open batch (a member left) stay.
    assert store.prune_batches(PruneBatches(week, 100)) == 1
    left = [r[0] for r in conn.execute("SELECT id FROM supervisor.batches ORDER BY id")]
    assert left == [young.id, still_open.id]


def _lease_index_reads(conn) -> int:
    conn.execute("SELECT pg_stat_force_next_flush()")  # this session's own reads first
    conn.execute("SELECT pg_stat_clear_snapshot()")
    return conn.execute("SELECT idx_tup_read FROM pg_stat_user_indexes "
                        "WHERE indexrelname = 'jobs_lease_idx'").fetchone()[0]


def _rescue(dsn, floor: float):
    """One leader's chores from ``floor`` on a connection of its own, its statistics
    flushed: (the round, lease index entries it read)."""
    import psycopg

    from supervisor.db import Store

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_force_next_flush()")
        led = Store(conn, "leader").lead_chores(42, 60.0, floor)
        conn.execute("SELECT pg_stat_force_next_flush()")
        conn.execute("SELECT 1")  # the flush happens as this statement ends
    return led


def test_a_floored_rescue_skips_the_dead_entries_a_held_snapshot_keeps(dsn, conn):
    """Issue 40: under a held snapshot every job that ran leaves its lease entry in the
    index, with a lease in the past. A rescue from a floor (the last round's clock less
    the TTL) reads past none of them, and still finds a lease that expired above it;
    the full scan finds one below it."""
    import psycopg

    from supervisor.db import FULL_SCAN, Attempt, Completion, Store

    ids = enqueue_many("k", [{"i": i} for i in range(3000)], conn=conn)
    holder = psycopg.connect(dsn)
    try:
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT count(*) FROM supervisor.jobs").fetchone()
        worker = Store(conn, "worker")
        claimed = worker.claim("default", ["k"], 3000)
        worker.started([Attempt(j.id, j.attempt) for j in claimed])
        # Their leases written an hour ago, then completed: 3,000 dead 'running'
        # versions in the lease index that the snapshot keeps.
        conn.execute("UPDATE supervisor.jobs SET lease_expires_at = now() - interval '1 hour'")
        worker.complete([Completion(j.id, j.attempt, "null") for j in claimed[2:]])
        old, recent = claimed[0].id, claimed[1].id
        conn.execute("UPDATE supervisor.jobs SET lease_expires_at = now() - interval '5 s' "
                     "WHERE id = %s", (recent,))
        floor = conn.execute("SELECT extract(epoch FROM now() - interval '1 minute')"
                             "::float8").fetchone()[0]
        before = _lease_index_reads(conn)
        led = _rescue(dsn, floor)
        floored_reads = _lease_index_reads(conn) - before
        assert led is not None and led.rescue_open
        assert [r.id for r in led.rescued] == [recent]
        before = _lease_index_reads(conn)
        led = _rescue(dsn, FULL_SCAN)
        full_reads = _lease_index_reads(conn) - before
        assert led is not None and [r.id for r in led.rescued] == [old]
    finally:
        holder.close()
    assert floored_reads < 10, (floored_reads, full_reads)
    assert full_reads >= len(ids) - 2, full_reads  # every dead entry, read again


def _index_reads(conn, index: str) -> int:
    conn.execute("SELECT pg_stat_force_next_flush()")  # this session's own reads first
    conn.execute("SELECT pg_stat_clear_snapshot()")
    return conn.execute("SELECT idx_tup_read FROM pg_stat_user_indexes "
                        "WHERE indexrelname = %s", (index,)).fetchone()[0]


def test_a_floored_prune_skips_the_rows_deleted_under_a_held_snapshot(dsn, conn):
    """Issue 40: rows pruned while a snapshot is held keep their entries in the finished
    index. A prune from the floor the last drained pass left reads none of them; one
    from the index's start reads them all again."""
    import psycopg

    from supervisor.db import Prune, Store

    enqueue_many("k", [{"i": i} for i in range(3000)], conn=conn)
    conn.execute("UPDATE supervisor.jobs SET state = 'completed', "
                 "finished_at = now() - interval '2 days'")
    day = 86400.0
    holder = psycopg.connect(dsn)
    try:
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT count(*) FROM supervisor.jobs").fetchone()
        with psycopg.connect(dsn, autocommit=True) as leader:
            store = Store(leader, "leader")
            while store.prune(Prune(True, day, 1000)) == 1000:
                pass
            floor = leader.execute("SELECT extract(epoch FROM now())::float8").fetchone()[0]
            floor -= day + 1.0
            reads = {}
            for name, start in (("floored", floor), ("full", float("-inf"))):
                leader.execute("SELECT pg_stat_force_next_flush()")
                before = _index_reads(conn, "jobs_finished_idx")
                assert store.prune(Prune(True, day, 1000, start)) == 0
                leader.execute("SELECT pg_stat_force_next_flush()")
                leader.execute("SELECT 1")
                reads[name] = _index_reads(conn, "jobs_finished_idx") - before
    finally:
        holder.close()
    assert reads["floored"] < 10, reads
    assert reads["full"] >= 3000, reads
