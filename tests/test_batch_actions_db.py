"""Per-batch actions (issue 42) against real PostgreSQL, with the members' states
written as a supervisor would: cancel, pause/resume, reprioritize, retry_failed, and
refusals on unknown or finished batches."""

from __future__ import annotations

import psycopg
import pytest

from shared.batches import BatchActionRefused, Callback, find_batch
from shared.defaults import CANCEL_CHANNEL
from shared.enqueue import enqueue_many

pytestmark = pytest.mark.timeout(120)

CLAIM = """UPDATE supervisor.jobs SET state = 'running', attempt = attempt + 1,
    lease_owner = 'test', lease_expires_at = now() + interval '1 minute'
    WHERE id = ANY(%s) AND state = 'available' RETURNING id"""


def states(conn, batch_id: int) -> dict[str, int]:
    return dict(conn.execute("SELECT state, count(*) FROM supervisor.jobs WHERE batch_id = %s"
                             " GROUP BY state", (batch_id,)).fetchall())


def callbacks(conn, kind: str = "bt_callback") -> int:
    return conn.execute("SELECT count(*) FROM supervisor.jobs WHERE kind = %s",
                        (kind,)).fetchone()[0]


def test_cancel_stops_claims_tells_running_members_and_calls_back_once(conn, dsn):
    batch = enqueue_many("bt_member", [{"n": i} for i in range(2500)],
                         then=Callback("bt_callback", {}), dsn=dsn)
    running = conn.execute(CLAIM, (batch.ids[:3],)).fetchall()
    assert len(running) == 3
    conn.execute(f"UPDATE supervisor.jobs SET state = 'completed', finished_at = now() "
                 f"WHERE id = {batch.ids[3]}")
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute(f"LISTEN {CANCEL_CHANNEL}")
        done = batch.cancel()
        told = {int(n.payload) for n in listener.notifies(timeout=1, stop_after=3)}
    assert told == set(batch.ids[:3])
    assert done.changed == 2499
    assert states(conn, batch.id) == {"cancelled": 2499, "completed": 1}
    summary = batch.summary()
    assert summary.finished and summary.stopped == "cancelled" and not summary.aborted
    assert summary.callback_id is not None and callbacks(conn) == 1
    # A claim after the stop gets nothing (not even a member made available by hand).
    conn.execute("UPDATE supervisor.batches SET finished_at = NULL, callback_id = NULL "
                 "WHERE id = %s", (batch.id,))
    conn.execute("UPDATE supervisor.jobs SET state = 'available', finished_at = NULL "
                 "WHERE id = %s", (batch.ids[10],))
    assert conn.execute(CLAIM, (batch.ids[10:11],)).fetchall() == []


def test_cancel_tells_running_members_in_the_stop_marks_own_commit(conn, dsn, monkeypatch):
    """The members already claimed (running, or queued in a child's pipe) are cancelled
    and their supervisors told by the commit that stops the batch, not by a later
    chunk: a writer that dies right after that commit (here: no chunk after it) has
    still told them, and a queued member cannot start for want of the notice."""
    from shared import batches_actions

    batch = enqueue_many("bt_member", [{"n": i} for i in range(50)],
                         then=Callback("bt_callback", {}), dsn=dsn)
    assert len(conn.execute(CLAIM, (batch.ids[:3],)).fetchall()) == 3
    monkeypatch.setattr(batches_actions, "_drain", lambda conn, batch_id: 0)
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute(f"LISTEN {CANCEL_CHANNEL}")
        batch.cancel()
        told = {int(n.payload) for n in listener.notifies(timeout=1, stop_after=3)}
    assert told == set(batch.ids[:3])
    assert states(conn, batch.id)["cancelled"] >= 3


def test_a_claim_meeting_a_stopped_batch_settles_a_chunk_of_it(conn, dsn):
    batch = enqueue_many("bt_member", [{"n": i} for i in range(1500)],
                         then=Callback("bt_callback", {}), dsn=dsn)
    # A cancel whose writer died after the stop committed: nothing settled yet.
    conn.execute("SELECT supervisor.batch_stop(%s, 'cancelled', 'test')", (batch.id,))
    assert conn.execute(CLAIM, (batch.ids[:5],)).fetchall() == []
    assert states(conn, batch.id) == {"cancelled": 1000, "available": 500}
    assert conn.execute(CLAIM, (batch.ids[-5:],)).fetchall() == []
    assert states(conn, batch.id) == {"cancelled": 1500}
    assert callbacks(conn) == 1


def test_pause_holds_members_and_resume_releases_them(conn, dsn):
    batch = enqueue_many("bt_member", [{"n": i} for i in range(1200)],
                         then=Callback("bt_callback", {}), dsn=dsn)
    conn.execute(CLAIM, (batch.ids[:2],))
    assert batch.pause().changed == 1198
    assert states(conn, batch.id) == {"running": 2, "scheduled": 1198}
    assert batch.summary().paused
    with pytest.raises(BatchActionRefused, match="paused already"):
        batch.pause()
    assert conn.execute(CLAIM, (batch.ids,)).fetchall() == []
    assert batch.resume().changed == 1198
    assert states(conn, batch.id) == {"running": 2, "available": 1198}
    assert len(conn.execute(CLAIM, (batch.ids[2:4],)).fetchall()) == 2
    with pytest.raises(BatchActionRefused, match="not paused"):
        batch.resume()


def test_reprioritize_changes_only_members_not_started(conn, dsn):
    batch = enqueue_many("bt_member", [{"n": i} for i in range(2100)],
                         then=Callback("bt_callback", {}), dsn=dsn)
    conn.execute(CLAIM, (batch.ids[:1],))
    assert batch.reprioritize(-5).changed == 2099
    got = dict(conn.execute("SELECT state, min(priority) FROM supervisor.jobs "
                            "WHERE batch_id = %s GROUP BY state", (batch.id,)).fetchall())
    assert got == {"running": 0, "available": -5}
    with pytest.raises(ValueError, match="32-bit int"):
        batch.reprioritize(2**40)


def test_retry_failed_reruns_exactly_the_discarded_and_calls_back_again(conn, dsn):
    batch = enqueue_many("bt_member", [{"n": i} for i in range(2300)],
                         then=Callback("bt_callback", {}), dsn=dsn)
    failed = set(batch.ids[::3])
    conn.execute("UPDATE supervisor.jobs SET state = 'discarded', finished_at = now(), "
                 "attempt = 3 WHERE id = ANY(%s)", (sorted(failed),))
    conn.execute("UPDATE supervisor.jobs SET state = 'completed', finished_at = now() "
                 "WHERE batch_id = %s AND state = 'available'", (batch.id,))
    assert batch.summary().finished and callbacks(conn) == 1
    assert batch.retry_failed().changed == len(failed)
    again = {r[0] for r in conn.execute("SELECT id FROM supervisor.jobs WHERE batch_id = %s "
                                        "AND state = 'available' AND attempt = 0",
                                        (batch.id,))}
    assert again == failed
    assert not batch.summary().finished
    conn.execute("UPDATE supervisor.jobs SET state = 'completed', finished_at = now() "
                 "WHERE batch_id = %s AND state = 'available'", (batch.id,))
    assert batch.summary().finished and callbacks(conn) == 2
    with pytest.raises(BatchActionRefused, match="no failed members"):
        batch.retry_failed()


def test_actions_on_unknown_or_finished_batches_say_so_and_change_nothing(conn, dsn):
    batch = enqueue_many("bt_member", [{}], then=Callback("bt_callback", {}), dsn=dsn)
    conn.execute("UPDATE supervisor.jobs SET state = 'completed', finished_at = now() "
                 "WHERE batch_id = %s", (batch.id,))
    for act in ("cancel", "pause", "resume"):
        with pytest.raises(BatchActionRefused, match="is finished"):
            getattr(batch, act)()
    with pytest.raises(BatchActionRefused, match="is finished"):
        batch.reprioritize(1)
    assert states(conn, batch.id) == {"completed": 1}
    assert conn.execute("SELECT stopped_at, paused_at FROM supervisor.batches WHERE id = %s",
                        (batch.id,)).fetchone() == (None, None)
    with pytest.raises(LookupError, match="does not exist"):
        find_batch(batch.id + 1000, dsn=dsn)
    ghost = type(batch)(batch.id + 1000, [], dsn)
    with pytest.raises(LookupError, match="does not exist"):
        ghost.cancel()
