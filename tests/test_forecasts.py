"""Forecasts and the children's report: a queue's drain time and a batch's ETA come
from measured run times and the children serving them, and a running supervisor
publishes each child's job, for how long, and its memory with its heartbeat."""

from __future__ import annotations

import signal

import pytest
from click.testing import CliRunner
from e2e import Supervisor, wait_until

from shared.batches import Callback, find_batch
from shared.enqueue import enqueue, enqueue_many
from supervisor import admin
from supervisor.cli.main import main

pytestmark = pytest.mark.timeout(120)

_MINUTE = """
INSERT INTO supervisor.job_minutes (minute, queue, kind, completed, run_sum, run_n)
VALUES (date_trunc('minute', now()) - %(ago)s * interval '1 minute', %(queue)s, %(kind)s,
        %(n)s, %(run_sum)s, %(n)s)
"""
_SUPERVISOR = """
INSERT INTO supervisor.supervisors (id, host, pid, queues, children, busy, heartbeat_at)
VALUES (%(id)s, 'build-1', 4242, %(queues)s, %(children)s, 0,
        now() - %(age)s * interval '1 second')
"""


def _queue(conn, name):
    return next(q for q in admin.queue_stats(conn) if q["name"] == name)


def test_a_queue_drains_in_its_jobs_times_run_time_over_the_children_serving_it(conn):
    enqueue_many("k", [{}] * 8, queue="q", conn=conn)
    # Nothing measured, none completed: unknown (the old pace rule says the same).
    assert _queue(conn, "q")["drain_seconds"] is None
    conn.execute(_MINUTE, {"ago": 5, "queue": "q", "kind": "k", "n": 10, "run_sum": 20.0})
    conn.execute(_MINUTE, {"ago": 90, "queue": "q", "kind": "k", "n": 10, "run_sum": 900.0})
    # Measured (2 s a job over the last hour; the older minute is outside it) but
    # nobody serves the queue: still unknown.
    q = _queue(conn, "q")
    assert q["run_mean"] == pytest.approx(2.0) and q["drain_seconds"] is None
    conn.execute(_SUPERVISOR, {"id": "a", "queues": ["q", "other"], "children": 3, "age": 1})
    conn.execute(_SUPERVISOR, {"id": "b", "queues": ["q"], "children": 1, "age": 1})
    conn.execute(_SUPERVISOR, {"id": "dead", "queues": ["q"], "children": 50, "age": 600})
    q = _queue(conn, "q")
    assert q["serving"] == 4
    assert q["drain_seconds"] == pytest.approx(8 * 2.0 / 4)
    # A global cap: two at once at most.
    admin.set_limits(conn, "q", {"max_running": 2}, clear=False)
    assert _queue(conn, "q")["drain_seconds"] == pytest.approx(8 * 2.0 / 2)
    admin.set_paused(conn, "q", True)
    assert _queue(conn, "q")["drain_seconds"] is None  # paused: never drains


def test_a_batch_eta_comes_from_its_run_times_and_the_children_serving_it(conn, dsn):
    batch = enqueue_many("bt_member", [{"n": i} for i in range(6)], queue="bq",
                         then=Callback("bt_callback", {}, queue="bq"), dsn=dsn)
    found = find_batch(batch.id, dsn)
    assert found.eta() is None  # no run time measured, nobody serves it
    conn.execute(_SUPERVISOR, {"id": "a", "queues": ["bq"], "children": 2, "age": 1})
    assert found.eta() is None  # served, but no run time yet
    # Before any member completes, the same kind's run time over the last hour.
    conn.execute(_MINUTE, {"ago": 3, "queue": "bq", "kind": "bt_member", "n": 4,
                           "run_sum": 4.0})
    assert found.eta() == pytest.approx(6 * 1.0 / 2)
    conn.execute("UPDATE supervisor.jobs SET state = 'completed', "
                 "attempted_at = now() - interval '3 seconds', finished_at = now() "
                 "WHERE id = ANY(%s)", (batch.ids[:2],))
    # Its own members' mean (3 s) now: 4 left on 2 children.
    assert found.eta() == pytest.approx(4 * 3.0 / 2, rel=0.01)
    shown = CliRunner().invoke(main, ["batches", "show", str(batch.id), "--dsn", dsn])
    assert shown.exit_code == 0, shown.output
    assert "eta:      6s (4 left, 3s mean run, 2 children)" in shown.output
    page = next(b for b in admin.pages.batches(conn) if b["id"] == batch.id)
    assert page["eta"] == pytest.approx(found.eta(), rel=0.01) and page["workers"] == 2
    conn.execute("UPDATE supervisor.jobs SET state = 'completed', finished_at = now() "
                 "WHERE id = ANY(%s)", (batch.ids[2:],))
    assert found.eta() == 0
    conn.execute("DELETE FROM supervisor.batches WHERE id = %s", (batch.id,))
    with pytest.raises(LookupError):
        found.eta()


@pytest.mark.slow
def test_a_supervisor_publishes_each_child_its_job_age_and_memory(dsn, conn):
    job_id = enqueue("e2e_sleep", {"seconds": 30}, conn=conn)
    sup = Supervisor(dsn, "-n", "2")
    try:
        def published():
            for s in admin.status(conn)["supervisors"]:
                busy = [w for w in s["workers"] if w["job_id"] == job_id]
                if busy and busy[0]["job_seconds"] >= 1 and len(s["workers"]) == 2:
                    return s
            return None

        found = wait_until(published, timeout=60, interval=0.2, what="the child's report")
        assert isinstance(found, dict)
        workers = found["workers"]
        assert sorted(w["pid"] for w in workers) == sorted(sup.children())
        busy = next(w for w in workers if w["job_id"] == job_id)
        idle = next(w for w in workers if w["job_id"] is None)
        assert (busy["kind"], busy["queue"], busy["attempt"], busy["state"]) == \
            ("e2e_sleep", "default", 1, "busy")
        assert idle["state"] == "idle" and idle["job_seconds"] is None
        for w in workers:  # memory read from /proc: a Python process holds megabytes
            assert w["rss_bytes"] > 1_000_000
            assert w["age_seconds"] >= (w["job_seconds"] or 0)
    finally:
        sup.signal(signal.SIGKILL)
        sup.stop()


def test_children_written_by_hand_are_shown_only_when_they_are_objects(conn):
    # info is any jsonb a script may write: only a list's objects are shown.
    for sid, info in (("a", '{"children": "lots"}'), ("b", '{"children": [1, {"pid": 7}]}'),
                      ("c", "[1]"), ("d", "{}"), ("e", '"text"')):
        conn.execute("INSERT INTO supervisor.supervisors (id, host, pid, info) "
                     "VALUES (%s, 'h', 1, %s::jsonb)", (sid, info))
    found = {s["id"]: s["workers"] for s in admin.status(conn)["supervisors"]}
    assert found == {"a": [], "b": [{"pid": 7}], "c": [], "d": [], "e": []}
