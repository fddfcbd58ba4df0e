"""procrastinate side of the peer benchmark; runs only inside procrastinate's own venv.

The database comes from ``BENCH_DSN``; ``BENCH_POOL_MAX_SIZE``, when set, sizes the
connector's psycopg pool (its docs: for short jobs the pool should hold as many
connections as the worker's concurrency, plus one). As a module it is the worker's app
(``procrastinate --app=peer_procrastinate.app worker ...``); as a script it sets up the
schema or enqueues the jobs:

    python peer_procrastinate.py schema          # procrastinate's own schema (schema --apply)
    python peer_procrastinate.py enqueue 20000   # batch_defer_async; prints {"seconds": ...}
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

import procrastinate


def pool_args() -> dict[str, int]:
    """Pool size from ``BENCH_POOL_MAX_SIZE``; psycopg_pool's defaults (4) without it."""
    size = os.environ.get("BENCH_POOL_MAX_SIZE")
    return {"min_size": min(4, int(size)), "max_size": int(size)} if size else {}


app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(conninfo=os.environ["BENCH_DSN"], **pool_args())
)


@app.task(name="noop", queue="bench")
async def noop() -> None:
    """Does nothing: measures the queue's own overhead per job."""
    return None


async def apply_schema() -> None:
    """The schema procrastinate ships, applied the way ``procrastinate schema --apply`` does."""
    async with app.open_async():
        await app.schema_manager.apply_schema_async()


async def enqueue(jobs: int) -> float:
    """Seconds for one ``batch_defer_async`` of ``jobs`` no-op jobs (connection open)."""
    async with app.open_async():
        await app.check_connection_async()
        t0 = time.perf_counter()
        await noop.batch_defer_async(*({} for _ in range(jobs)))
        return time.perf_counter() - t0


def main() -> None:
    command = sys.argv[1]
    if command == "schema":
        asyncio.run(apply_schema())
    elif command == "enqueue":
        print(json.dumps({"seconds": asyncio.run(enqueue(int(sys.argv[2])))}))
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main()
