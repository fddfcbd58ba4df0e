"""Adversarial checks of the batch actions and the failure budget (issue 42), on real
PostgreSQL: a cancel racing claims and completions from other connections, a budget
reached by two failing connections at once, and schema 0025 applied to a database
holding a half-done batch."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import psycopg
import pytest
from legacy_schema import migrate_the_old_way

from shared.batches import Callback, find_batch
from shared.enqueue import enqueue_many
from shared.migrate import available_migrations, current_version

pytestmark = pytest.mark.timeout(180)

CLAIM = """
UPDATE supervisor.jobs SET state = 'running', attempt = attempt + 1, lease_owner = %(me)s
WHERE id IN (SELECT id FROM supervisor.jobs WHERE batch_id = %(b)s AND state = 'available'
             ORDER BY id LIMIT 20 FOR UPDATE SKIP LOCKED)
RETURNING id"""
FINISH = """UPDATE supervisor.jobs SET state = %(state)s, lease_owner = NULL,
    finished_at = CASE WHEN %(state)s = 'retryable' THEN NULL ELSE now() END
WHERE id = ANY(%(ids)s) AND state = 'running' AND lease_owner = %(me)s"""


class Worker(threading.Thread):
    """A fake supervisor: claims 20 members at a time and ends them as ``state``."""

    def __init__(self, dsn: str, batch_id: int, me: str, state: str) -> None:
        super().__init__(daemon=True)
        self.dsn, self.batch_id, self.me, self.state = dsn, batch_id, me, state
        self.stop = threading.Event()
        self.claimed: list[int] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                while not self.stop.is_set():
                    p = {"me": self.me, "b": self.batch_id, "state": self.state}
                    ids = [r[0] for r in conn.execute(CLAIM, p)]
                    self.claimed += ids
                    if ids:
                        conn.execute(FINISH, dict(p, ids=ids))
        except BaseException as exc:  # reported by the test
            self.error = exc


def callbacks(conn) -> int:
    return conn.execute("SELECT count(*) FROM supervisor.jobs WHERE kind = 'bt_callback'"
                        ).fetchone()[0]


def test_a_cancel_racing_claims_and_completions_calls_back_once(conn, dsn):
    batch = enqueue_many("bt_member", [{} for _ in range(8000)],
                         then=Callback("bt_callback", {}), dsn=dsn)
    workers = [Worker(dsn, batch.id, f"w{i}", "completed") for i in range(3)]
    for w in workers:
        w.start()
    while sum(len(w.claimed) for w in workers) < 200:
        time.sleep(0.01)
    batch.cancel()
    claimed_at_cancel = [len(w.claimed) for w in workers]
    # Any claim from now on meets the stop: nothing more is taken.
    for _ in range(20):
        assert conn.execute(CLAIM, {"me": "late", "b": batch.id}).fetchall() == []
    for w in workers:
        w.stop.set()
        w.join(30)
        assert w.error is None, w.error
    assert [len(w.claimed) for w in workers] == claimed_at_cancel
    s = batch.summary()
    assert s.finished and s.completed + s.cancelled == 8000 and s.stopped == "cancelled"
    assert s.completed <= sum(claimed_at_cancel)  # a member claimed then cancelled is not
    assert callbacks(conn) == 1


def test_two_connections_failing_at_once_abort_the_batch_once(conn, dsn):
    batch = enqueue_many("bt_member", [{} for _ in range(3000)], max_failures=25,
                         then=Callback("bt_callback", {}), dsn=dsn)
    workers = [Worker(dsn, batch.id, f"w{i}", "discarded") for i in range(2)]
    for w in workers:
        w.start()
    s = find_batch(batch.id, dsn=dsn).wait(timeout=60)
    for w in workers:
        w.stop.set()
        w.join(30)
        assert w.error is None, w.error
    assert s.aborted and "max_failures=25" in s.reason
    # Each connection ends at most one claim of 20 past the budget.
    assert 25 <= s.discarded <= 25 + 2 * 20
    assert s.discarded + s.cancelled == 3000
    assert callbacks(conn) == 1


def test_schema_0025_on_a_database_holding_a_half_done_batch(fresh_dsn):
    """The old files to 0024, a half-done batch, the rest of them as the old `migrate`
    ran them, then today's `supervisor migrate` (the upgrade into the baseline)."""
    with psycopg.connect(fresh_dsn, autocommit=True) as conn:
        migrate_the_old_way(conn, upto=24)
        batch = conn.execute(
            "INSERT INTO supervisor.batches (total, callback_kind, callback_queue, "
            "callback_args) VALUES (4, 'cb', 'default', '{}') RETURNING id").fetchone()[0]
        ids = [conn.execute("INSERT INTO supervisor.jobs (kind, batch_id) VALUES ('k', %s) "
                            "RETURNING id", (batch,)).fetchone()[0] for _ in range(4)]
        conn.execute("UPDATE supervisor.jobs SET state = 'completed', finished_at = now() "
                     "WHERE id = %s", (ids[0],))
        assert 25 in migrate_the_old_way(conn)
    done = subprocess.run([sys.executable, "-m", "supervisor", "migrate", "--dsn", fresh_dsn],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    with psycopg.connect(fresh_dsn, autocommit=True) as conn:
        assert current_version(conn) == available_migrations()[-1].version
        row = conn.execute("SELECT failures, stopped_at, max_failures FROM supervisor.batches"
                           ).fetchone()
        assert row == (0, None, None)
        conn.execute("UPDATE supervisor.jobs SET state = 'running' WHERE id = %s", (ids[1],))
        result = find_batch(batch, dsn=fresh_dsn).cancel()
        assert result.changed == 3
        assert conn.execute("SELECT count(*) FROM supervisor.jobs WHERE kind = 'cb'"
                            ).fetchone()[0] == 1
