"""PgQueuer side of the peer benchmark; runs only inside PgQueuer's own venv.

The database comes from ``BENCH_DSN`` (``PGDSN`` for the ``pgq`` CLI). The worker is one
asyncpg connection, the driver PgQueuer documents as its fastest:

    python peer_pgqueuer.py enqueue 20000   # Queries.enqueue with lists; prints {"seconds": ...}
    python peer_pgqueuer.py worker 25       # pgqueuer.run(create, batch_size=25) on uvloop

The worker is started with ``pgqueuer.run``, which its docs call equivalent to
``pgq run peer_pgqueuer:create``, on uvloop as ``pgq run`` does: in PgQueuer 1.6.0 with
typer 0.29 ``pgq run`` itself fails at start-up (``'str' object has no attribute 'name'``
in ``setup_fancy_logger``). The schema comes from PgQueuer's own CLI (``pgq install``
then ``pgq autovac``), which works.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import pgqueuer
import uvloop
from pgqueuer import AsyncpgDriver, Job, PgQueuer, Queries


@asynccontextmanager
async def create() -> AsyncIterator[PgQueuer]:
    """The worker: one no-op entrypoint on a single asyncpg connection."""
    conn = await asyncpg.connect(os.environ["BENCH_DSN"])
    try:
        pgq = PgQueuer(AsyncpgDriver(conn))

        @pgq.entrypoint("noop")
        async def noop(job: Job) -> None:
            """Does nothing: measures the queue's own overhead per job."""
            return None

        yield pgq
    finally:
        await conn.close()


async def enqueue(jobs: int) -> float:
    """Seconds for one bulk ``Queries.enqueue`` of ``jobs`` no-op jobs (connection open)."""
    conn = await asyncpg.connect(os.environ["BENCH_DSN"])
    try:
        queries = Queries(AsyncpgDriver(conn))
        t0 = time.perf_counter()
        await queries.enqueue(["noop"] * jobs, [None] * jobs, [0] * jobs)
        return time.perf_counter() - t0
    finally:
        await conn.close()


def main() -> None:
    command, number = sys.argv[1], int(sys.argv[2])
    if command == "enqueue":
        print(json.dumps({"seconds": asyncio.run(enqueue(number))}))
    elif command == "worker":
        # SIGTERM/SIGINT stop it gracefully (pgqueuer.run installs the handlers).
        uvloop.run(pgqueuer.run(create, batch_size=number))
    else:
        raise SystemExit("usage: peer_pgqueuer.py enqueue JOBS | worker BATCH_SIZE")


if __name__ == "__main__":
    main()
