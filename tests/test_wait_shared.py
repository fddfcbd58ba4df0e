"""Waiters under real faults, on a private PostgreSQL (``throwaway_server``): a server
restart in the middle of ``supervisor.wait``, ``Batch.wait`` and ``wait_async`` is ridden
out (each waiter reads its row again after the reconnect, since a notification sent
meanwhile is lost), and a thousand concurrent waiters, threads or asyncio tasks, hold
one connection between them."""

from __future__ import annotations

import asyncio
import os
import threading

import psycopg
import pytest
from e2e import wait_until

import supervisor
from shared import waiting
from shared.batches import BatchSummary, Callback
from shared.db import DatabaseUnavailable
from shared.enqueue import enqueue, enqueue_many
from shared.migrate import migrate

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

WAITERS = 1000


@pytest.fixture
def server(throwaway_server, monkeypatch):
    # Only a notification or a reconnect can end these waits early, never the poll.
    monkeypatch.setattr(waiting, "FALLBACK_POLL", 60.0)
    with psycopg.connect(throwaway_server.dsn, autocommit=True) as conn:
        migrate(conn)
    return throwaway_server


def sql(dsn: str, query: str, params: tuple = ()) -> list[tuple]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


def complete(dsn: str, ids: list[int], *, notify: bool = True) -> None:
    # Clearing `watched` in the same statement makes the trigger send nothing: a
    # completion whose notification is lost.
    sql(dsn, "UPDATE supervisor.jobs SET state = 'completed', finished_at = now(),"
             " result = to_jsonb(id), watched = watched AND %s WHERE id = ANY(%s)",
        (notify, ids))


def watched(dsn: str) -> int:
    try:
        return sql(dsn, "SELECT count(*) FROM supervisor.jobs WHERE watched")[0][0]
    except psycopg.OperationalError:
        return 0


def connections(dsn: str) -> int:
    """Client sessions on the server, other than the one asking and the producer pool's
    (the test's own enqueues)."""
    return sql(dsn, "SELECT count(*) FROM pg_stat_activity WHERE backend_type ="
                    " 'client backend' AND pid <> pg_backend_pid()"
                    " AND application_name <> 'supervisor-enqueue'")[0][0]


def in_thread(fn) -> tuple[threading.Thread, dict]:
    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the test
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


def test_waits_ride_out_a_server_restart(server):
    dsn = server.dsn
    jobs = [enqueue("w_member", {}, dsn=dsn) for _ in range(7)]
    lost, after = jobs[:3], jobs[3:6]  # completed with the notification lost / after
    extra = jobs[6]
    batch = enqueue_many("w_member", [{}, {}], then=Callback("w_done", {}), dsn=dsn)
    threads = [in_thread(lambda j=j: supervisor.wait(j, timeout=90, dsn=dsn))
               for j in (lost[0], lost[1], after[0], after[1])]
    batch_thread = in_thread(lambda: supervisor.batch(batch.id, dsn=dsn).wait(timeout=90))

    async def waiting_tasks():
        return await asyncio.gather(*(supervisor.wait_async(j, 90, dsn=dsn)
                                      for j in (lost[2], after[2])))

    async_thread = in_thread(lambda: asyncio.run(waiting_tasks()))
    wait_until(lambda: watched(dsn) == 6, timeout=30, what="every job watched")
    # The batch waiter reads the batch once at its start: wait for its connection.
    wait_until(lambda: connections(dsn) >= 2, timeout=30, what="both listeners")

    short = in_thread(lambda: supervisor.wait(extra, timeout=8, dsn=dsn))
    wait_until(lambda: watched(dsn) == 7, timeout=30, what="the short wait under way")
    complete(dsn, lost, notify=False)  # only a read after the reconnect can see these
    server.stop()
    with pytest.raises(DatabaseUnavailable, match="cannot wait"):
        supervisor.wait(after[0], timeout=5, dsn=dsn)  # a new wait while it is down
    short[0].join(30)  # its timeout ends during the outage
    server.start()
    wait_until(lambda: watched(dsn) >= 3 and connections(dsn) >= 2, timeout=30,
               what="the waiters back on the restarted server")
    complete(dsn, after)
    complete(dsn, batch.ids)

    for thread, _ in (*threads, batch_thread, async_thread):
        thread.join(60)
    results = [box.get("value", box.get("error")) for _, box in threads]
    assert results == [lost[0], lost[1], after[0], after[1]]
    summary = batch_thread[1].get("value", batch_thread[1].get("error"))
    assert isinstance(summary, BatchSummary), summary
    assert (summary.total, summary.completed) == (2, 2)
    assert async_thread[1].get("value", async_thread[1].get("error")) == [lost[2], after[2]]
    # A wait whose timeout ends during the outage: the timeout it asked for, saying why.
    assert isinstance(short[1].get("error"), TimeoutError), short[1]
    assert "the database is unreachable" in str(short[1]["error"])


def test_a_thousand_waiting_threads_hold_one_connection(server):
    dsn = server.dsn
    ids = enqueue_many("w_member", [{}] * WAITERS, dsn=dsn)
    threading.stack_size(256 * 1024)
    try:
        threads = [in_thread(lambda j=j: supervisor.wait(j, timeout=150, dsn=dsn))
                   for j in ids]
    finally:
        threading.stack_size(0)
    wait_until(lambda: watched(dsn) == WAITERS, timeout=90, what="every job watched")
    held = connections(dsn)
    complete(dsn, ids)
    for thread, _ in threads:
        thread.join(60)
    results = [box.get("value", box.get("error")) for _, box in threads]
    assert held == 1
    assert results == ids
    assert connections(dsn) == 0  # the last waiter out closed it


def test_a_thousand_waiting_tasks_hold_one_connection(server):
    dsn = server.dsn
    ids = enqueue_many("w_member", [{}] * WAITERS, dsn=dsn)

    async def scenario():
        tasks = [asyncio.create_task(supervisor.wait_async(j, 150, dsn=dsn)) for j in ids]
        await asyncio.to_thread(wait_until, lambda: watched(dsn) == WAITERS, 90,
                                what="every job watched")
        held = await asyncio.to_thread(connections, dsn)
        await asyncio.to_thread(complete, dsn, ids)
        results = await asyncio.gather(*tasks, return_exceptions=True)
        return held, results

    held, results = asyncio.run(scenario())
    assert held == 1
    assert results == ids
    assert connections(dsn) == 0


def test_a_forked_child_waits_on_a_connection_of_its_own(dsn, monkeypatch):
    # Guards the shared design: a child that used its parent's listener would interleave
    # its statements with the parent's on one socket.
    monkeypatch.setattr(waiting, "FALLBACK_POLL", 60.0)
    from shared import listening

    held, done = enqueue("w_member", {}, dsn=dsn), enqueue("w_member", {}, dsn=dsn)
    complete(dsn, [done])
    thread, box = in_thread(lambda: supervisor.wait(held, timeout=60, dsn=dsn))
    wait_until(lambda: sql(dsn, "SELECT watched FROM supervisor.jobs WHERE id = %s",
                           (held,))[0][0], what="the parent's waiter")
    [parent_listener] = listening._listeners.values()
    pid = os.fork()
    if pid == 0:  # the child: its own listener, its own connection, then leave at once
        code = 1
        try:
            result = supervisor.wait(done, timeout=20, dsn=dsn)
            inherited = listening._inherited[-1] is parent_listener
            code = 0 if result == done and inherited else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert parent_listener.connections() == 1  # untouched by the child
    complete(dsn, [held])
    thread.join(30)
    assert box == {"value": held}
