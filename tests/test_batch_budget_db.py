"""The failure budget (issue 42) against real PostgreSQL: refused budgets, the count
of failed attempts, max_failures and max_failure_rate aborting the batch once."""

from __future__ import annotations

import pytest

from shared.batches import Callback
from shared.enqueue import enqueue_many

pytestmark = pytest.mark.timeout(120)


def claim(conn, ids):
    conn.execute("UPDATE supervisor.jobs SET state = 'running', attempt = attempt + 1, "
                 "lease_owner = 't' WHERE id = ANY(%s) AND state = 'available'", (ids,))


def end(conn, ids, state):
    conn.execute("UPDATE supervisor.jobs SET state = %s, finished_at = CASE WHEN %s <> "
                 "'retryable' THEN now() END, lease_owner = NULL WHERE id = ANY(%s)",
                 (state, state, ids))


def callbacks(conn) -> int:
    return conn.execute("SELECT count(*) FROM supervisor.jobs WHERE kind = 'bt_callback'"
                        ).fetchone()[0]


@pytest.mark.parametrize("options, text", [
    ({"max_failures": 0}, "max_failures must be a positive integer"),
    ({"max_failures": 2.5}, "max_failures must be a positive integer"),
    ({"max_failures": True}, "max_failures must be a positive integer"),
    ({"max_failure_rate": 0}, r"max_failure_rate must be a number in \(0, 1\]"),
    ({"max_failure_rate": 1.5}, r"max_failure_rate must be a number in \(0, 1\]"),
    ({"max_failure_rate": float("nan")}, r"max_failure_rate must be a number in \(0, 1\]"),
    ({"max_failure_rate": "0.5"}, r"max_failure_rate must be a number in \(0, 1\]"),
])
def test_a_bad_budget_is_refused_before_anything_is_written(conn, dsn, options, text):
    with pytest.raises(ValueError, match=text):
        enqueue_many("bt_member", [{}], then=Callback("bt_callback", {}), dsn=dsn, **options)
    with pytest.raises(ValueError, match="needs a batch"):
        enqueue_many("bt_member", [{}], dsn=dsn, max_failures=3)
    assert conn.execute("SELECT count(*) FROM supervisor.batches").fetchone()[0] == 0


def test_failed_attempts_count_and_the_budget_aborts_once(conn, dsn):
    batch = enqueue_many("bt_member", [{} for _ in range(1500)], max_failures=3,
                         then=Callback("bt_callback", {}), dsn=dsn)
    ids = batch.ids
    claim(conn, ids[:4])
    end(conn, ids[:1], "completed")
    end(conn, ids[1:2], "retryable")  # a failed attempt, to be retried
    end(conn, ids[2:3], "discarded")
    s = batch.summary()
    assert (s.failures, s.stopped) == (2, None)
    end(conn, ids[3:4], "retryable")  # the third: the budget is reached
    s = batch.summary()
    assert s.aborted and s.reason == "3 failed attempts reached max_failures=3"
    # The first chunk is settled by the failing statement; a claim settles the rest.
    claim(conn, ids[-1:])
    s = batch.summary()
    assert s.finished and (s.completed, s.discarded, s.cancelled) == (1, 1, 1498)
    assert callbacks(conn) == 1


def test_the_rate_waits_for_twenty_finished_attempts(conn, dsn):
    batch = enqueue_many("bt_member", [{} for _ in range(100)], max_failure_rate=0.5,
                         then=Callback("bt_callback", {}), dsn=dsn)
    ids = batch.ids
    claim(conn, ids[:19])
    end(conn, ids[:19], "discarded")  # 19 of 19 failed, but fewer than 20 finished
    assert batch.summary().stopped is None
    claim(conn, ids[19:20])
    end(conn, ids[19:20], "completed")
    s = batch.summary()
    assert s.aborted and "19 of 20 finished attempts failed" in s.reason
    assert s.finished and s.cancelled == 80 and callbacks(conn) == 1


def test_a_batch_without_a_budget_counts_nothing(conn, dsn):
    batch = enqueue_many("bt_member", [{} for _ in range(5)],
                         then=Callback("bt_callback", {}), dsn=dsn)
    claim(conn, batch.ids)
    end(conn, batch.ids, "discarded")
    s = batch.summary()
    assert s.failures == 0 and s.stopped is None and s.finished and s.discarded == 5
