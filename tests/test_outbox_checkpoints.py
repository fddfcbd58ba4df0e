"""The outbox's checkpoint writes against real PostgreSQL (issue 28): fenced by the
attempt's lease, written before a release of the same job, answered for a flushed one,
and a value PostgreSQL refuses never holds up the writes behind it."""

from __future__ import annotations

import psycopg
import pytest

from shared.enqueue import enqueue
from supervisor.db import Store
from supervisor.engine.outbox import Outbox
from supervisor.observe import SupervisorMetrics


class Direct:
    """``Database.call`` on one store, errors raised."""

    up = True

    def __init__(self, store: Store) -> None:
        self.store = store

    def call(self, what, default, operation="query"):
        return what(self.store)


@pytest.fixture
def parts(conn):
    store = Store(conn, "me")
    return store, Outbox(SupervisorMetrics("me", version="1"), 0.01), Direct(store)


def columns(conn, job_id):
    return conn.execute("SELECT state, attempt, checkpoint, checkpoint_at IS NOT NULL, errors "
                        "FROM supervisor.jobs WHERE id = %s", (job_id,)).fetchone()


def test_a_stopped_jobs_checkpoint_is_written_before_its_release(conn, parts):
    store, outbox, db = parts
    enqueue("k", conn=conn)
    [job] = store.claim("default", ["k"], 1)
    outbox.checkpointed(job, '{"done": 5}', False, 0.0)
    outbox.stopped(job, 0.0)
    outbox.flush(db, 0.0)
    assert columns(conn, job.id) == ("available", 0, {"done": 5}, True, [])


def test_a_flushed_checkpoint_is_answered_and_a_fenced_one_says_so(conn, parts):
    store, outbox, db = parts
    enqueue("k", conn=conn)
    enqueue("k", conn=conn)
    ours, lost = store.claim("default", ["k"], 2)
    conn.execute("UPDATE supervisor.jobs SET lease_owner = 'other' WHERE id = %s", (lost.id,))
    outbox.checkpointed(ours, '{"i": 1}', True, 0.0)
    outbox.checkpointed(lost, '{"i": 2}', True, 0.0)
    assert outbox.due(0.0, claim_in_flight=True)  # a handler waits: due at once
    outbox.flush(db, 0.0)
    assert sorted(outbox.take_acks()) == sorted([(ours.id, True), (lost.id, False)])
    assert columns(conn, ours.id)[2] == {"i": 1}
    assert columns(conn, lost.id)[2] is None  # fenced: not this supervisor's any more


def test_a_value_postgresql_refuses_is_dropped_and_the_rest_is_written(conn, parts):
    store, outbox, db = parts
    for _ in range(3):
        enqueue("k", conn=conn)
    bad, good, done = store.claim("default", ["k"], 3)
    outbox.checkpointed(bad, '{"s": "\\u0000"}', True, 0.0)  # jsonb refuses NUL
    outbox.checkpointed(good, '{"ok": true}', False, 0.0)
    outbox.completed(done, '"fine"', 0.0)
    outbox.flush(db, 0.0)
    assert columns(conn, good.id)[2] == {"ok": True}
    assert columns(conn, done.id)[0] == "completed"
    assert columns(conn, bad.id)[2] is None
    assert (bad.id, False) in outbox.take_acks()
    with pytest.raises(psycopg.DataError):  # what the fallback stood in for
        conn.execute("SELECT '{\"s\": \"\\u0000\"}'::jsonb")
