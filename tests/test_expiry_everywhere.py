"""Expiry where issue 28 left it out (schema 0021), against a real database: the keyed
claims (plain and aged) skip jobs past their expires_at as the plain claim does; an
expired batch member is final for its batch (the batch closes, its callback is enqueued,
its summary counts it); an expired dependency cancels its dependents as a discarded one
does; a held dependent that expires releases nothing later and never deadlocks with its
dependency finishing; a waiter is told."""

from __future__ import annotations

import threading

import psycopg
import pytest

from shared.batches import Callback, find_batch
from shared.enqueue import enqueue, enqueue_many
from shared.waiting import JobFailed, wait
from supervisor.db import Store

pytestmark = pytest.mark.timeout(60)


def expire_now(conn, *ids):
    """Move the jobs' expires_at into the past (a producer refuses a past moment; the
    column is the contract, so plain SQL stands for the clock moving on)."""
    conn.execute("UPDATE supervisor.jobs SET expires_at = now() - interval '1 s' "
                 "WHERE id = ANY(%s)", (list(ids),))


def states(conn, *ids):
    rows = conn.execute("SELECT id, state FROM supervisor.jobs WHERE id = ANY(%s)",
                        (list(ids),)).fetchall()
    return [dict(rows)[i] for i in ids]


@pytest.mark.parametrize("aging", [0.0, 30.0])
def test_the_keyed_claim_skips_expired_jobs_and_the_sweep_ends_them(conn, aging):
    # Old enough for the aged claim's second window (each level's oldest aged jobs).
    doomed = enqueue_many("k", [{}, {}], queue="kq", concurrency_keys=["a", "b"],
                          expires_in=600, conn=conn)
    live = enqueue("k", {}, queue="kq", concurrency_key="c", conn=conn)
    conn.execute("UPDATE supervisor.jobs SET run_at = now() - interval '1 hour'")
    expire_now(conn, *doomed)
    store = Store(conn, "owner", 30.0)
    claimed = store.claim("kq", ["k"], 10, aging=aging, per_key=1)
    assert [job.id for job in claimed] == [live]
    assert store.expire(100) == 2
    assert states(conn, *doomed) == ["expired", "expired"]


def test_an_expired_member_is_final_for_its_batch_and_the_callback_follows(conn, dsn):
    batch = enqueue_many("k", [{}, {}, {}], then=Callback("cb", {"x": 1}), expires_in=600,
                         dsn=dsn)
    first, *rest = batch.ids
    store = Store(conn, "owner", 30.0)
    (job,) = store.claim("default", ["k"], 1)
    assert job.id == first
    conn.execute("UPDATE supervisor.jobs SET state = 'completed', finished_at = now() "
                 "WHERE id = %s", (first,))
    expire_now(conn, *rest)
    assert store.expire(100) == 2
    summary = find_batch(batch.id, dsn=dsn).wait(timeout=10)
    assert (summary.completed, summary.expired, summary.pending) == (1, 2, 0)
    assert summary.finished and summary.callback_id is not None
    assert conn.execute("SELECT kind, args, state FROM supervisor.jobs WHERE id = %s",
                        (summary.callback_id,)).fetchone() == ("cb", {"x": 1}, "available")


def test_an_expired_dependency_cancels_its_dependents_and_tells_its_waiter(conn, dsn):
    dep = enqueue("k", {}, expires_in=600, dsn=dsn)
    after = enqueue("k", {}, depends_on=[dep], dsn=dsn)
    expire_now(conn, dep)
    assert Store(conn, "owner", 30.0).expire(100) == 1
    assert states(conn, dep, after) == ["expired", "cancelled"]
    (errors,) = conn.execute("SELECT errors FROM supervisor.jobs WHERE id = %s",
                             (after,)).fetchone()
    assert errors[-1]["message"] == f"dependency {dep} ended expired"
    with pytest.raises(JobFailed, match=f"job {dep} expired"):
        wait(dep, timeout=5, dsn=dsn)
    # Enqueued once the dependency expired already: cancelled at once.
    late = enqueue("k", {}, depends_on=[dep], dsn=dsn)
    assert states(conn, late) == ["cancelled"]


def test_a_held_dependent_that_expires_cancels_its_own_and_its_edges_go_with_the_blocker(
        conn, dsn):
    blocker = enqueue("k", {}, dsn=dsn)  # never runs here
    held = enqueue("k", {}, depends_on=[blocker], expires_in=600, dsn=dsn)
    below = enqueue("k", {}, depends_on=[held], dsn=dsn)
    assert states(conn, held, below) == ["scheduled", "scheduled"]
    expire_now(conn, held)
    assert Store(conn, "owner", 30.0).expire(100) == 1
    assert states(conn, held, below) == ["expired", "cancelled"]
    # The blocker completing later consumes the expired job's edge and counter, and
    # releases nothing: an expired job stays expired.
    conn.execute("UPDATE supervisor.jobs SET state = 'completed', finished_at = now() "
                 "WHERE id = %s", (blocker,))
    assert states(conn, held, below) == ["expired", "cancelled"]
    edges = conn.execute("SELECT count(*) FROM supervisor.job_dependencies WHERE "
                         "dependent_id = ANY(%s)", ([held, below],)).fetchone()[0]
    counters = conn.execute("SELECT count(*) FROM supervisor.dependents WHERE id = ANY(%s)",
                            ([held, below],)).fetchone()[0]
    assert (edges, counters) == (0, 0)


def test_a_dependent_expiring_while_its_dependency_completes_never_deadlocks(conn, dsn):
    # The sweep expiring a held job and a supervisor completing its dependency, at the
    # same moment: the first version of 0021 deleted the expired job's edges from its
    # own row's trigger (job row, then edge and counter), the reverse of the order the
    # completion's settlement takes (edge, counter, then job row): 41 deadlocks in 300
    # such pairs on the test machine, the completion's write among the victims.
    deadlocks = []

    def at_once(statement, job_id, start):
        with psycopg.connect(dsn, autocommit=True) as own:
            start.wait()
            try:
                own.execute(statement, (job_id,))
            except psycopg.errors.DeadlockDetected as exc:
                deadlocks.append(exc)

    for _ in range(100):
        blocker = enqueue("k", {}, dsn=dsn)
        held = enqueue("k", {}, depends_on=[blocker], expires_in=600, dsn=dsn)
        expire_now(conn, held)
        start = threading.Barrier(2)
        racers = [threading.Thread(target=at_once, args=(
                      "UPDATE supervisor.jobs SET state = 'expired', finished_at = now() "
                      "WHERE id = %s AND state = 'scheduled'", held, start)),
                  threading.Thread(target=at_once, args=(
                      "UPDATE supervisor.jobs SET state = 'completed', finished_at = now() "
                      "WHERE id = %s", blocker, start))]
        for racer in racers:
            racer.start()
        for racer in racers:
            racer.join()
        # Whichever committed first decides: expired, or released by the completion.
        assert states(conn, blocker)[0] == "completed"
        assert states(conn, held)[0] in ("expired", "available")
    assert deadlocks == []
