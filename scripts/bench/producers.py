"""Producer throughput: one ``enqueue`` per job against a plain INSERT, from threads and
from asyncio tasks, all measured in the same run on the same scratch database.

* single: ``handle.enqueue(n=i)`` (the pool, no ``conn=``) and ``enqueue(..., conn=c)``
  against ``INSERT INTO supervisor.jobs (kind, queue, args) VALUES (...)`` on one
  autocommit psycopg connection, interleaved round by round; the ratio is the cost of
  one enqueue over one plain INSERT (target: at most 1.25).
* threads: 1 / 4 / 8 threads calling ``handle.enqueue`` at once, against the same number
  of threads doing plain INSERTs, each on its own connection.
* asyncio: 1 / 8 / 64 concurrent tasks calling ``await handle.enqueue_async``.

Every call is its own autocommit transaction (one commit, one WAL flush) as a web
request's enqueue is. Usage:

    python scripts/bench/producers.py [--dsn DSN] [--jobs 2000] [--runs 3]
                                      [--commit durable|fast]

``--commit fast`` sets ``synchronous_commit = off`` on the scratch database for both sides:
no WAL flush per commit, so the figures show the CPU cost of a call, not the disk's.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common
import psycopg

from shared.enqueue import enqueue
from shared.producers.aio_pool import async_producer_pool
from shared.producers.pool import producer_pool
from workers.registry import job

PLAIN = "INSERT INTO supervisor.jobs (kind, queue, args) VALUES (%s, %s, %s::jsonb)"


@job(name="bench_producer")
def bench_producer(n: int) -> None:
    """A kind to enqueue; never run here."""


def rate(count: int, func: Callable[[], None]) -> float:
    start = time.perf_counter()
    func()
    return count / (time.perf_counter() - start)


def in_threads(threads: int, jobs: int, work: Callable[[int, int], None]) -> float:
    """Jobs/s of ``threads`` threads each running ``work(thread, jobs // threads)``,
    started together."""
    per = jobs // threads
    barrier = threading.Barrier(threads + 1)

    def body(t: int) -> None:
        barrier.wait()
        work(t, per)

    pool = [threading.Thread(target=body, args=(t,)) for t in range(threads)]
    for thread in pool:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in pool:
        thread.join()
    return per * threads / (time.perf_counter() - start)


def run(dsn: str, jobs: int, runs: int, commit: str):
    scratch = common.scratch_database(dsn, "supervisor_bench_producers")
    with psycopg.connect(scratch, autocommit=True) as conn:
        # Both sides alike: every connection opened from here on gets this setting.
        conn.execute(f"ALTER DATABASE supervisor_bench_producers "
                     f"SET synchronous_commit = {'on' if commit == 'durable' else 'off'}")
    print(common.machine(dsn), f"synchronous_commit in the scratch database: "
          f"{'on' if commit == 'durable' else 'off'}")
    plain_conns = [psycopg.connect(scratch, autocommit=True) for _ in range(8)]
    samples: dict[str, list[float]] = {}

    def record(label: str, value: float) -> None:
        samples.setdefault(label, []).append(value)

    def plain_insert(t: int, count: int) -> None:
        conn = plain_conns[t]
        for i in range(count):
            conn.execute(PLAIN, ("bench_producer", "default", f'{{"n": {i}}}'))

    def via_handle(t: int, count: int) -> None:
        for i in range(count):
            bench_producer.enqueue(n=i)

    def via_conn(t: int, count: int) -> None:
        conn = plain_conns[t]
        for i in range(count):
            enqueue("bench_producer", {"n": i}, conn=conn)

    async def tasks(concurrency: int) -> float:
        per = jobs // concurrency

        async def body() -> None:
            for i in range(per):
                await bench_producer.enqueue_async(n=i)

        await bench_producer.enqueue_async(n=-1)  # the first connection, outside the clock
        start = time.perf_counter()
        await asyncio.gather(*(body() for _ in range(concurrency)))
        return per * concurrency / (time.perf_counter() - start)

    os.environ["SUPERVISOR_DSN"] = scratch
    try:
        for t in range(8):
            plain_insert(t, 10)  # past psycopg's prepare threshold, like the pool's
        bench_producer.enqueue(n=-1)
        for _ in range(runs):
            common.reset(scratch)
            # Single calls in small interleaved blocks, so the three see the same load.
            spent = {"plain INSERT": 0.0, "handle.enqueue": 0.0, "enqueue(conn=c)": 0.0}
            block = 100
            order = [("plain INSERT", plain_insert), ("handle.enqueue", via_handle),
                     ("enqueue(conn=c)", via_conn)]
            for turn in range(max(1, jobs // block)):
                # rotated, so that no method always runs right after the same other one
                for label, work in order[turn % 3:] + order[:turn % 3]:
                    start = time.perf_counter()
                    work(0, block)
                    spent[label] += time.perf_counter() - start
            done = max(1, jobs // block) * block
            for label, seconds in spent.items():
                record(f"{label}, single calls", done / seconds)
            for threads in (1, 4, 8):
                common.reset(scratch)
                record(f"plain INSERT, {threads} threads",
                       in_threads(threads, jobs, plain_insert))
                record(f"handle.enqueue, {threads} threads",
                       in_threads(threads, jobs, via_handle))
            for concurrency in (1, 8, 64):
                common.reset(scratch)
                loop = asyncio.new_event_loop()
                try:
                    record(f"enqueue_async, {concurrency} tasks",
                           loop.run_until_complete(tasks(concurrency)))
                    loop.run_until_complete(_close_async(scratch))
                finally:
                    loop.close()
    finally:
        os.environ.pop("SUPERVISOR_DSN", None)
        for conn in plain_conns:
            conn.close()
        producer_pool(scratch).close()
        common.drop_database(dsn, "supervisor_bench_producers")
    medians = {label: common.median(values) for label, values in samples.items()}
    for label, value in medians.items():
        yield label, f"{value:,.0f}"

    def ratio(slow: str, fast: str) -> str:
        per_run = [f / s for f, s in zip(samples[fast], samples[slow], strict=True)]
        return (f"{common.median(per_run):.2f} (runs: "
                f"{', '.join(f'{r:.2f}' for r in per_run)})")

    yield "cost of handle.enqueue / plain INSERT", \
        ratio("handle.enqueue, single calls", "plain INSERT, single calls")
    yield "cost of enqueue(conn=c) / plain INSERT", \
        ratio("enqueue(conn=c), single calls", "plain INSERT, single calls")
    yield "handle.enqueue: 8 threads / 1 thread", \
        ratio("handle.enqueue, 1 threads", "handle.enqueue, 8 threads")
    yield "plain INSERT: 8 threads / 1 thread", \
        ratio("plain INSERT, 1 threads", "plain INSERT, 8 threads")


async def _close_async(dsn: str) -> None:
    async_producer_pool(dsn).close()


if __name__ == "__main__":
    common.cli(run, __doc__.splitlines()[0], jobs=2000, runs=3, commit="durable")
