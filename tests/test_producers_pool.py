"""The producers' per-process pool against real PostgreSQL and real processes: threads,
fork, and connections the server cut (restart, idle kill, mid-statement)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest

from shared.db import DatabaseUnavailable
from shared.enqueue import enqueue, enqueue_many
from shared.migrate import migrate
from shared.producers import combine
from shared.producers.aio import enqueue_async
from shared.producers.aio_pool import async_producer_pool
from shared.producers.pool import producer_pool

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]  # processes or waits: CI lane
ROOT = Path(__file__).resolve().parent.parent


def wait_for(condition, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def pooled_backends(dsn: str) -> set[int]:
    return {c.connection.info.backend_pid for c in producer_pool(dsn)._idle}


@pytest.mark.slow
def test_eight_threads_2000_jobs_each_no_duplicate_no_loss(dsn, conn):
    results: dict[int, list[int]] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def producer(t: int) -> None:
        try:
            start.wait()
            results[t] = [enqueue("k", {"t": t, "i": i}, dsn=dsn) for i in range(2000)]
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)

    threads = [threading.Thread(target=producer, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    ids = [job_id for t in range(8) for job_id in results[t]]
    assert len(ids) == len(set(ids)) == 16000
    rows = conn.execute("SELECT id, (args->>'t')::int, (args->>'i')::int "
                        "FROM supervisor.jobs").fetchall()
    assert {r[0] for r in rows} == set(ids)
    assert sorted((r[1], r[2]) for r in rows) == [(t, i) for t in range(8) for i in range(2000)]
    for t in range(8):  # each id went back to the thread whose job it is
        stored = dict(((r[1], r[2]), r[0]) for r in rows)
        assert results[t] == [stored[(t, i)] for i in range(2000)]
    pool = producer_pool(dsn)
    assert 1 <= pool.opened <= combine.MAX_LEADERS  # combined callers share connections
    pool.close()


FORK_SCRIPT = """
import json, os, sys
from shared.enqueue import enqueue
from shared.producers.pool import producer_pool
dsn = sys.argv[1]
first = enqueue("k", {"who": "parent"}, dsn=dsn)
parent_backend = producer_pool(dsn)._idle[0].connection.info.backend_pid
read_end, write_end = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(read_end)
    child_id = enqueue("k", {"who": "child"}, dsn=dsn)
    backends = [c.connection.info.backend_pid for c in producer_pool(dsn)._idle]
    os.write(write_end, json.dumps({"id": child_id, "backends": backends}).encode())
    sys.exit(0)  # a normal exit: atexit closes the child's pool, never the parent's
os.close(write_end)
with os.fdopen(read_end) as pipe:
    child = json.loads(pipe.read())
_, status = os.waitpid(pid, 0)
second = enqueue("k", {"who": "parent again"}, dsn=dsn)
after = [c.connection.info.backend_pid for c in producer_pool(dsn)._idle]
print(json.dumps({"first": first, "parent_backend": parent_backend, "child": child,
                  "status": status, "second": second, "after": after}))
"""


def test_fork_after_enqueue_child_opens_its_own_connection(dsn, conn):
    proc = subprocess.run([sys.executable, "-c", FORK_SCRIPT, dsn], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["status"] == 0
    assert out["child"]["backends"] and out["parent_backend"] not in out["child"]["backends"]
    assert out["after"] == [out["parent_backend"]]  # the parent's session survived the child
    who = dict(conn.execute("SELECT id, args->>'who' FROM supervisor.jobs").fetchall())
    assert who == {out["first"]: "parent", out["child"]["id"]: "child",
                   out["second"]: "parent again"}


def test_idle_connection_killed_by_the_server_is_replaced_before_sending(dsn, conn):
    enqueue("k", dsn=dsn)
    [victim] = pooled_backends(dsn)
    conn.execute("SELECT pg_terminate_backend(%s)", (victim,))
    wait_for(lambda: conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s",
                                  (victim,)).fetchone()[0] == 0, what="the backend to exit")
    job_id = enqueue("k", {"after": "kill"}, dsn=dsn)
    assert conn.execute("SELECT args FROM supervisor.jobs WHERE id = %s",
                        (job_id,)).fetchone() == ({"after": "kill"},)
    assert victim not in pooled_backends(dsn)
    producer_pool(dsn).close()


def test_connection_lost_mid_statement_is_one_clear_line_and_no_job(dsn, conn):
    enqueue_many("k", [{}], dsn=dsn)  # opens the pooled connection
    [backend] = pooled_backends(dsn)
    outcome: list[BaseException | int] = []
    with psycopg.connect(dsn) as locker:
        locker.execute("LOCK TABLE supervisor.jobs IN ACCESS EXCLUSIVE MODE")

        def blocked() -> None:
            try:
                outcome.append(enqueue("k", {"lost": True}, dsn=dsn))
            except BaseException as exc:
                outcome.append(exc)

        thread = threading.Thread(target=blocked)
        thread.start()
        wait_for(lambda: conn.execute(
            "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
            (backend,)).fetchone() == ("Lock",), what="the enqueue to wait on the lock")
        conn.execute("SELECT pg_terminate_backend(%s)", (backend,))
        thread.join(30)
        locker.rollback()
    [error] = outcome
    assert isinstance(error, DatabaseUnavailable)
    assert "lost the connection to PostgreSQL" in str(error) and "\n" not in str(error)
    assert conn.execute("SELECT count(*) FROM supervisor.jobs").fetchone() == (1,)
    assert enqueue("k", dsn=dsn) > 0  # the pool replaced the dead connection
    producer_pool(dsn).close()


@pytest.mark.slow
def test_producer_survives_a_server_restart_and_says_so_when_it_is_down(throwaway_server):
    server = throwaway_server
    with psycopg.connect(server.dsn, autocommit=True) as c:
        migrate(c)

    async def async_enqueue(note: str) -> int:
        return await enqueue_async("k", {"note": note}, dsn=server.dsn)

    async def async_round(note: str) -> tuple[int, int]:
        job_id = await async_enqueue(note)
        opened = async_producer_pool(server.dsn).opened
        return job_id, opened

    loop = asyncio.new_event_loop()
    try:
        before = enqueue("k", {"note": "before"}, dsn=server.dsn)
        loop.run_until_complete(async_enqueue("async before"))
        server.restart()
        after = enqueue("k", {"note": "after restart"}, dsn=server.dsn)
        async_after, opened = loop.run_until_complete(async_round("async after restart"))
        assert opened == 1  # the dead one was replaced, not added to
        server.stop()
        with pytest.raises(DatabaseUnavailable) as down:
            enqueue("k", dsn=server.dsn)
        assert "cannot connect to PostgreSQL" in str(down.value)
        assert "\n" not in str(down.value)
        with pytest.raises(DatabaseUnavailable, match="cannot connect"):
            loop.run_until_complete(async_enqueue("down"))
        server.start()
        last = enqueue("k", {"note": "back"}, dsn=server.dsn)
    finally:
        async_producer_pool_close(loop, server.dsn)
        loop.close()
        producer_pool(server.dsn).close()
    with psycopg.connect(server.dsn, autocommit=True) as c:
        notes = dict(c.execute("SELECT id, args->>'note' FROM supervisor.jobs").fetchall())
    assert notes[before] == "before" and notes[after] == "after restart"
    assert notes[async_after] == "async after restart" and notes[last] == "back"
    assert sorted(notes.values()) == sorted(["before", "async before", "after restart",
                                             "async after restart", "back"])


def async_producer_pool_close(loop: asyncio.AbstractEventLoop, dsn: str) -> None:
    async def close() -> None:
        async_producer_pool(dsn).close()

    loop.run_until_complete(close())


FORK_MID_SEND_SCRIPT = """
import json, os, sys, threading, time
import psycopg
from shared.enqueue import enqueue
from shared.producers import combine
from shared.producers.pool import producer_pool
dsn = sys.argv[1]
enqueue("k", {"who": "warm"}, dsn=dsn)
locker = psycopg.connect(dsn)
locker.execute("LOCK TABLE supervisor.jobs IN ACCESS EXCLUSIVE MODE")
done = []
thread = threading.Thread(target=lambda: done.append(enqueue("k", {"who": "thread"}, dsn=dsn)))
thread.start()
watch = psycopg.connect(dsn, autocommit=True)
deadline = time.monotonic() + 20
while watch.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND application_name = 'supervisor-enqueue'").fetchone()[0] != 1:
    assert time.monotonic() < deadline, "the thread's enqueue never blocked"
    time.sleep(0.01)
pid = os.fork()  # while another thread is a leader with a connection lent out
if pid == 0:
    state = {"leaders": combine.combiner(dsn)._leaders, "opened": producer_pool(dsn).opened}
    print(json.dumps(state), flush=True)
    os._exit(0)
_, status = os.waitpid(pid, 0)
locker.rollback()
thread.join(30)
print(json.dumps({"status": status, "thread_id": done[0],
                  "after": enqueue("k", {"who": "after"}, dsn=dsn)}))
"""


def test_fork_while_another_thread_is_sending_starts_the_child_clean(dsn, conn):
    proc = subprocess.run([sys.executable, "-c", FORK_MID_SEND_SCRIPT, dsn], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    child, parent = (json.loads(line) for line in proc.stdout.splitlines())
    assert child == {"leaders": 0, "opened": 0}  # nothing of the parent's sending state
    assert parent["status"] == 0
    who = dict(conn.execute("SELECT id, args->>'who' FROM supervisor.jobs").fetchall())
    assert who[parent["thread_id"]] == "thread" and who[parent["after"]] == "after"


def test_each_event_loop_gets_its_own_connections_closed_with_the_loop(dsn, conn):
    import gc

    def backends() -> int:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = "
                            "current_database() AND application_name = 'supervisor-enqueue'"
                            ).fetchone()[0]

    first = asyncio.run(enqueue_async("k", {"loop": 1}, dsn=dsn))
    second = asyncio.run(enqueue_async("k", {"loop": 2}, dsn=dsn))  # a new loop works too
    assert second > first
    gc.collect()  # the loops are gone: their pools' connections are closed
    wait_for(lambda: backends() == 0, what="the loops' connections to close")


def test_a_pooled_connection_on_an_fd_past_1024_is_reused_not_reconnected(dsn):
    # A web worker holding many sockets: the producer's connection lands past fd 1,024.
    # select() refused such an fd; the pool took that for a dead connection and opened
    # a new one at every enqueue.
    import os
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"the fd limit ({hard}) leaves no fd past 1,024")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    filler = []
    try:
        while not filler or filler[-1] < 1030:
            filler.append(os.open(os.devnull, os.O_RDONLY))
        producer_pool(dsn).close()  # a pool of this process's own, opened from here on
        enqueue("k", dsn=dsn)
        [first] = pooled_backends(dsn)
        sockets = [c.connection.pgconn.socket for c in producer_pool(dsn)._idle]
        assert sockets[0] > 1024
        for n in range(5):
            enqueue("k", {"n": n}, dsn=dsn)
        assert pooled_backends(dsn) == {first}
    finally:
        producer_pool(dsn).close()
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
