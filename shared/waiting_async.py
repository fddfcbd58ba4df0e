"""``await supervisor.wait_async(job_id, timeout)``: ``supervisor.wait`` for asyncio.

The same protocol as ``shared.waiting`` (LISTEN on ``supervisor_final``, mark the job
watched, read its state, wait for ``j<id>`` or the fallback poll) on a psycopg
``AsyncConnection``, so an event loop never blocks and no thread is started.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg

from shared.dsn import resolve_dsn
from shared.waiting import (
    _STATE,
    _WATCH,
    CHANNEL,
    FALLBACK_POLL,
    _check,
    job_outcome,
)


async def wait_async(job_id: int, timeout: float | None = None, *,
                     dsn: str | None = None) -> Any:
    """The result of job ``job_id`` once it completed. Raises ``JobFailed`` if it ends
    discarded or cancelled, ``JobNotFound`` if there is no such job, ``TimeoutError``
    after ``timeout`` seconds (None: no limit)."""
    _check(job_id, timeout, "job id")
    deadline = None if timeout is None else time.monotonic() + timeout
    conn = await psycopg.AsyncConnection.connect(resolve_dsn(dsn, announce=False),
                                                 autocommit=True)
    async with conn:
        await conn.execute(f"LISTEN {CHANNEL}")
        await conn.execute(_WATCH, (job_id,))
        wanted = f"j{job_id}"
        while True:
            row = await (await conn.execute(_STATE, (job_id,))).fetchone()
            state, result = job_outcome(job_id, row)
            if state == "completed":
                return result
            await _await(conn, wanted, deadline, f"job {job_id} ({state})")


async def _await(conn: psycopg.AsyncConnection, wanted: str, deadline: float | None,
                 what: str) -> None:
    left = FALLBACK_POLL
    if deadline is not None:
        left = min(left, deadline - time.monotonic())
        if left <= 0:
            raise TimeoutError(f"timed out waiting for {what}")
    try:
        async with asyncio.timeout(left):
            async for note in conn.notifies():
                if note.payload == wanted:
                    return
    except TimeoutError:
        return  # the fallback poll: the caller reads the state again
