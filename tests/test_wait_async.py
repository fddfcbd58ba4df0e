"""``await supervisor.wait_async``: woken by the job's completion, not by a poll; the
same errors as ``supervisor.wait``."""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest

import supervisor
from shared.enqueue import enqueue
from supervisor.db import Completion, Failure, Store

pytestmark = [pytest.mark.timeout(60), pytest.mark.slow]  # processes or waits: CI lane


def watched(dsn: str, job_id: int) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT watched FROM supervisor.jobs WHERE id = %s",
                            (job_id,)).fetchone()[0]


def finish(dsn: str, job_id: int, *, fail: bool) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        store = Store(conn, "tester")
        [job] = store.claim("default", ["k"], 1)
        if fail:
            store.fail([Failure(job.id, job.attempt, "error", "boom", None, None, True)])
        else:
            store.complete([Completion(job.id, job.attempt, '{"ok": 1}')])


@pytest.mark.parametrize("fail", [False, True])
def test_wait_async_is_woken_by_the_jobs_end(dsn, fail):
    job_id = enqueue("k", dsn=dsn, max_attempts=1)

    async def scenario():
        waiter = asyncio.create_task(supervisor.wait_async(job_id, 40, dsn=dsn))
        while not await asyncio.to_thread(watched, dsn, job_id):  # listening and marked
            await asyncio.sleep(0.01)
        started = time.monotonic()
        await asyncio.to_thread(finish, dsn, job_id, fail=fail)
        try:
            return await waiter, time.monotonic() - started
        except supervisor.JobFailed as exc:
            return exc, time.monotonic() - started

    outcome, took = asyncio.run(scenario())
    assert took < 4.0  # the notification, not the 5 s fallback poll
    if fail:
        assert isinstance(outcome, supervisor.JobFailed) and "boom" in str(outcome)
    else:
        assert outcome == {"ok": 1}


def test_wait_async_for_a_missing_job_and_a_timeout(dsn):
    with pytest.raises(supervisor.JobNotFound):
        asyncio.run(supervisor.wait_async(10**12, 1, dsn=dsn))
    job_id = enqueue("k", dsn=dsn)
    with pytest.raises(TimeoutError):
        asyncio.run(supervisor.wait_async(job_id, 0.5, dsn=dsn))
