"""Completions carried on a claim: one UNION of writable CTEs against psycopg's
pipeline mode (COMPLETE then CLAIM in one transaction, one round trip).

Both write the previous batch's completions and claim the next batch in one commit; the
question is which costs the database and the parent less. Each run enqueues ``jobs``
no-op rows, then loops claim+complete in batches until the queue is empty.

Usage: python scripts/bench/carry.py [--dsn DSN] [--jobs 20000] [--batch 64 512] [--runs 3]
"""

from __future__ import annotations

import argparse
import time

import common
import psycopg
from psycopg.rows import dict_row

from shared.enqueue import enqueue_many
from supervisor.db import ClaimRequest, Completion, Store
from supervisor.db.claim import ClaimVariant, Shape, claim_sql
from supervisor.db.sql import COMPLETE

CLAIM = claim_sql(ClaimVariant(aged=False, keyed=False, shape=Shape.BARE))

OWNER = "bench-carry"


def drain_union(store: Store, batch: int) -> int:
    done, pending = 0, []
    while True:
        claimed = store.run_claim(ClaimRequest("default", ["noop"], batch,
                                               completions=pending)).jobs
        done += len(pending)
        pending = [Completion(j.id, j.attempt, "null") for j in claimed]
        if not claimed:
            return done


def drain_pipeline(store: Store, batch: int) -> int:
    conn = store.conn
    done, pending = 0, []
    while True:
        with conn.pipeline(), conn.transaction():
            if pending:
                conn.execute(COMPLETE, store._complete_params(pending), prepare=False)
            cur = conn.cursor(row_factory=dict_row).execute(
                CLAIM, store._claim_params(ClaimRequest("default", ["noop"], batch)),
                prepare=True)
        rows = cur.fetchall()
        done += len(pending)
        pending = [Completion(r["id"], r["attempt"], "null") for r in rows]
        if not rows:
            return done


def one_run(dsn: str, jobs: int, batch: int, how) -> float:
    common.reset(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        enqueue_many("noop", [{}] * jobs, conn=conn)
        conn.execute("ANALYZE supervisor.jobs")
        store = Store(conn, OWNER)
        started = time.perf_counter()
        done = how(store, batch)
        elapsed = time.perf_counter() - started
    assert done == jobs, (done, jobs)
    return jobs / elapsed


def run(dsn: str, jobs: int, batches: list[int], runs: int) -> list[tuple[str, str]]:
    rows = []
    for batch in batches:
        for name, how in (("UNION of writable CTEs", drain_union),
                          ("pipeline mode, COMPLETE + CLAIM in one transaction",
                           drain_pipeline)):
            rates = [one_run(dsn, jobs, batch, how) for _ in range(runs)]
            rows.append((f"claim+complete, batch {batch}: {name}",
                         f"{common.median(rates):,.0f} jobs/s"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=common.DEFAULT_DSN)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--batch", type=int, nargs="+", default=[64, 512])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    name = "supervisor_bench_carry"
    dsn = common.scratch_database(args.dsn, name)
    try:
        for label, value in run(dsn, args.jobs, args.batch, args.runs):
            print(f"{label}: {value}")
    finally:
        common.drop_database(args.dsn, name)


if __name__ == "__main__":
    main()
