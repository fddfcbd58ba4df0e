"""What priority aging costs a claim: the claim with ``aging`` 0 (the plain CLAIM) and 60 s on a
20k-job queue spread over 5 priority levels with ages up to 10 minutes (so the aged
branch has work), batches of 1, 16 and 512, run alternately, each inside a transaction
that is rolled back so every run sees the same table. Prints the median time per claim.

    python scripts/bench/claim_aging.py [--dsn DSN] [--rounds 30]
"""

from __future__ import annotations

import argparse
import statistics
import time

import psycopg
from common import DEFAULT_DSN, drop_database, scratch_database

from shared.enqueue import enqueue_many
from supervisor.db import ClaimRequest, Store
from supervisor.db.claim import claim_sql, variant


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    dsn = scratch_database(args.dsn, "bench_claim_aging")
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            enqueue_many("noop", [{"i": i} for i in range(20_000)], conn=conn)
            conn.execute("UPDATE supervisor.jobs SET priority = id % 5, "
                         "run_at = now() - (id % 600) * interval '1 second'")
            conn.execute("VACUUM ANALYZE supervisor.jobs")
        with psycopg.connect(dsn) as conn:
            for batch in (1, 16, 512):
                times: dict[float, list[float]] = {0.0: [], 60.0: []}
                for _ in range(args.rounds):
                    for aging in times:
                        request = ClaimRequest("default", ["noop"], batch, aging)
                        params = Store(conn, "bench")._claim_params(request)
                        sql = claim_sql(variant(request, blocking=True))
                        started = time.perf_counter()
                        rows = conn.execute(sql, params, prepare=True).fetchall()
                        times[aging].append(time.perf_counter() - started)
                        conn.rollback()
                        assert len(rows) == batch
                off, on = (statistics.median(times[a]) * 1000 for a in (0.0, 60.0))
                print(f"batch {batch:4d}: aging off {off:7.3f} ms, aging 60 s {on:7.3f} ms "
                      f"({on / off:4.2f}x)")
    finally:
        drop_database(args.dsn, "bench_claim_aging")


if __name__ == "__main__":
    main()
