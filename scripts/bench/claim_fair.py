"""What a fair queue's claim costs (issue 42): the plain claim and the fair one
(``fair = "batch"``) on a queue of ``--batches`` batches of 20,000 waiting members each,
batches of 1, 16 and 512 jobs, run alternately, each inside a transaction that is rolled
back so every run sees the same table. Prints the median time per claim.

    python scripts/bench/claim_fair.py [--dsn DSN] [--rounds 30] [--batches 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import psycopg
from common import DEFAULT_DSN, drop_database, scratch_database

from shared.batches import Callback
from shared.enqueue import enqueue_many
from supervisor.db import ClaimRequest, Store
from supervisor.db.claim import claim_sql, variant


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--batches", type=int, default=2)
    args = parser.parse_args()
    dsn = scratch_database(args.dsn, "bench_claim_fair")
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for _ in range(args.batches):
                enqueue_many("noop", [{}] * 20_000, then=Callback("noop", {}), conn=conn)
            conn.execute("VACUUM ANALYZE supervisor.jobs")
        with psycopg.connect(dsn) as conn:
            for batch in (1, 16, 512):
                times: dict[bool, list[float]] = {False: [], True: []}
                for _ in range(args.rounds):
                    for fair in times:
                        request = ClaimRequest("default", ["noop"], batch, fair=fair)
                        params = Store(conn, "bench")._claim_params(request)
                        sql = claim_sql(variant(request, blocking=True))
                        started = time.perf_counter()
                        rows = conn.execute(sql, params, prepare=True).fetchall()
                        times[fair].append(time.perf_counter() - started)
                        conn.rollback()
                        assert len(rows) == batch
                plain, fair_ms = (statistics.median(times[f]) * 1000 for f in (False, True))
                print(f"| claim of {batch}, {args.batches} batches of 20,000 | "
                      f"plain {plain:.3f} ms, fair {fair_ms:.3f} ms ({fair_ms / plain:.2f}x) |")
    finally:
        drop_database(args.dsn, "bench_claim_fair")


if __name__ == "__main__":
    main()
