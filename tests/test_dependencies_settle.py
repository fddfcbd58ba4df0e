"""depends_on without a lock on the dependency (schema 0009): the producer's open
transaction never makes a writer of the dependency wait, the deferred trigger settles
what finished meanwhile at the producer's commit, and fan-in costs O(N)."""

import threading

import psycopg
import pytest

from shared.batches import Callback
from shared.enqueue import enqueue, enqueue_many

pytestmark = pytest.mark.timeout(60)


def finish(conn, ids, state="completed"):
    conn.execute("UPDATE supervisor.jobs SET state = %s, finished_at = now() "
                 "WHERE id = ANY(%s)", (state, list(ids)))


def row(conn, job_id):
    return conn.execute("SELECT state, errors FROM supervisor.jobs WHERE id = %s",
                        (job_id,)).fetchone()


def writer(dsn):
    """A connection that gives up on any lock after 2 s, as a parent must not wait."""
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute("SET lock_timeout = '2s'")
    return conn


@pytest.mark.parametrize("outcome", ["completed", "discarded"])
def test_a_dependency_finishing_under_an_open_producer_is_settled_at_its_commit(
        conn, dsn, outcome):
    a, b = enqueue("bt_step", {}, dsn=dsn), enqueue("bt_step", {}, dsn=dsn)
    with psycopg.connect(dsn) as producer, writer(dsn) as parent:
        held = enqueue("bt_step", {}, depends_on=[a, b], conn=producer)
        # Both rows are free: renewing and finishing them waits for nobody.
        parent.execute("UPDATE supervisor.jobs SET heartbeat_at = now() WHERE id = ANY(%s)",
                       ([a, b],))
        finish(parent, [a], outcome)
        finish(parent, [b])
        producer.commit()
    state, errors = row(conn, held)
    if outcome == "completed":
        assert state == "available"
    else:
        assert state == "cancelled"
        assert errors[-1]["message"] == f"dependency {a} ended discarded"
    assert conn.execute("SELECT count(*) FROM supervisor.job_dependencies").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM supervisor.dependents").fetchone()[0] == 0


def test_a_commit_racing_a_completion_in_flight_waits_for_it_then_sees_it(conn, dsn):
    """The completion holds the dependency's row (not committed) while the producer
    commits: the producer's settlement retries until the completion committed, then
    finds the dependency completed (the completion's trigger could not see the edge)."""
    a = enqueue("bt_step", {}, dsn=dsn)
    parent = psycopg.connect(dsn)
    producer = psycopg.connect(dsn)
    try:
        finish(parent, [a])  # not committed: the row stays locked
        held = enqueue("bt_step", {}, depends_on=[a], conn=producer)
        committing = threading.Thread(target=producer.commit)
        committing.start()
        committing.join(0.5)
        assert committing.is_alive()  # settling waits for the completion in flight
        parent.commit()
        committing.join(10)
        assert not committing.is_alive()
    finally:
        parent.close()
        producer.close()
    assert row(conn, held)[0] == "available"


def test_a_completion_after_the_commit_consumes_the_edge(conn, dsn):
    a, b = enqueue("bt_step", {}, dsn=dsn), enqueue("bt_step", {}, dsn=dsn)
    held = enqueue("bt_step", {}, depends_on=[a, b], dsn=dsn)
    assert conn.execute("SELECT pending, settled FROM supervisor.dependents WHERE id = %s",
                        (held,)).fetchone() == (2, True)
    finish(conn, [a])
    assert row(conn, held)[0] == "scheduled"
    finish(conn, [a])  # a second final write of the same job counts nothing
    assert conn.execute("SELECT pending FROM supervisor.dependents WHERE id = %s",
                        (held,)).fetchone() == (1,)
    finish(conn, [b])
    assert row(conn, held)[0] == "available"


def test_several_dependents_in_one_transaction_settle_together(conn, dsn):
    deps = [enqueue("bt_step", {}, dsn=dsn) for _ in range(4)]
    with psycopg.connect(dsn) as producer:
        first = enqueue("bt_step", {}, depends_on=deps[:2], conn=producer)
        second = enqueue("bt_step", {}, depends_on=deps[1:], conn=producer)
        with writer(dsn) as parent:
            finish(parent, deps[:3])
    assert (row(conn, first)[0], row(conn, second)[0]) == ("available", "scheduled")
    finish(conn, deps[3:])
    assert row(conn, second)[0] == "available"


def _work_to_complete(conn, dsn, n):
    """Rows the server read (sequential and index fetches, every table of the schema)
    while the n dependencies of one job completed one statement each."""
    deps = enqueue_many("bt_step", [{}] * n, dsn=dsn)
    held = enqueue("bt_step", {}, depends_on=deps, dsn=dsn)
    # Statistics, as autovacuum would have them: without, the planner guesses the row
    # count of the fresh table from its size and the columns' widths, and from some size
    # on plans this helper's own UPDATE by id as a sequential scan, which is not the
    # trigger's work being measured (it flipped when 0015 added two columns).
    conn.execute("ANALYZE supervisor.jobs")
    with conn.transaction():
        for dep in deps:
            finish(conn, [dep])
        [work] = conn.execute(
            "SELECT sum(coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)) "
            "FROM pg_stat_xact_user_tables WHERE schemaname = 'supervisor'").fetchone()
    assert row(conn, held)[0] == "available"
    return int(work)


def test_fan_in_costs_linear_work(conn, dsn):
    """Completing N dependencies of one job reads O(N) rows in all: 4x the dependencies,
    about 4x the rows (0008's trigger re-read every dependency each time: 16x)."""
    small = _work_to_complete(conn, dsn, 200)
    large = _work_to_complete(conn, dsn, 800)
    assert large < 5 * small, (small, large)


def test_no_producer_path_left_open_makes_the_parents_writes_wait(conn, dsn):
    """Every way a producer writes (depends_on, a batch, a unique key, COPY), inside one
    transaction left open: renewing, completing and failing running jobs, dependencies
    and batch members among them, waits for nothing."""

    running = enqueue_many("bt_step", [{}] * 4, dsn=dsn)
    member = enqueue_many("bt_step", [{}], then=Callback("bt_step", {}), dsn=dsn).ids[0]
    conn.execute("UPDATE supervisor.jobs SET state = 'running', attempt = 1, "
                 "lease_owner = 'p' WHERE id = ANY(%s)", ([*running, member],))
    with psycopg.connect(dsn) as producer, writer(dsn) as parent:
        on_first = enqueue("bt_step", {}, depends_on=running[:2], conn=producer)
        on_member = enqueue("bt_step", {}, depends_on=[member], conn=producer)
        enqueue_many("bt_step", [{}] * 3, then=Callback("bt_step", {}), conn=producer)
        enqueue("bt_step", {}, unique_key="k", conn=producer)
        enqueue_many("bt_step", [{}] * 3, conn=producer)
        parent.execute("UPDATE supervisor.jobs SET lease_expires_at = now() + interval '8 s' "
                       "WHERE state = 'running'")
        finish(parent, [*running[:3], member])
        finish(parent, running[3:], "retryable")
        producer.commit()
    assert (row(conn, on_first)[0], row(conn, on_member)[0]) == ("available", "available")
    assert conn.execute("SELECT count(*) FROM supervisor.batches WHERE finished_at IS NOT NULL"
                        ).fetchone() == (1,)
