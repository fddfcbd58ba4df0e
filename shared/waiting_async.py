"""``await supervisor.wait_async(job_id, timeout)``: ``supervisor.wait`` for asyncio.

The same protocol and policy as ``shared.waiting`` (LISTEN on ``supervisor_final``, mark
the job watched, read its state, wait for ``j<id>`` or the fallback poll, ride out a
lost connection) on a psycopg ``AsyncConnection`` shared by every waiter of the event
loop (``shared.listening_async``), so an event loop never blocks and no thread is started.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg

from shared import listening_async
from shared.dsn import resolve_dsn
from shared.listening import Unreachable
from shared.waiting import _STATE, _WATCH, Marked, Pace, _check


async def wait_async(job_id: int, timeout: float | None = None, *,
                     dsn: str | None = None) -> Any:
    """The result of job ``job_id`` once it completed. Raises ``JobFailed`` if it ends
    discarded or cancelled, ``JobNotFound`` if there is no such job, ``TimeoutError``
    after ``timeout`` seconds (None: no limit)."""
    _check(job_id, timeout, "job id")
    deadline = None if timeout is None else time.monotonic() + timeout

    marked = Marked()

    async def check(conn: psycopg.AsyncConnection, generation: int) -> Any:
        if not marked.on(generation):
            await conn.execute(_WATCH, (job_id,))
        row = await (await conn.execute(_STATE, (job_id,))).fetchone()
        return marked.read(job_id, row, generation)

    listener, waiter = listening_async.acquire(resolve_dsn(dsn, announce=False),
                                               f"j{job_id}")
    try:
        pace = Pace(deadline)
        while True:
            if pace.due(waiter.heard, listener.generation):
                waiter.heard = False
                try:
                    generation, found = await listener.run(check, pace.read_by())
                except Unreachable as exc:
                    pace.failed(exc, listener.generation)
                except TimeoutError:
                    pass  # the deadline, checked below
                else:
                    if found.done:
                        return found.value
                    pace.read(found, generation)
            pace.check_deadline(f"job {job_id}")
            await listener.listen(waiter, pace.until(), pace.seen)
    finally:
        await listening_async.release(listener, waiter)
