"""What a per-key limit costs a claim: the plain claim against ``claim_keyed()`` (the
claim of a queue with ``--per-key-max-running``), one connection, claim then complete,
on a queue of ``--jobs`` available jobs spread over ``--keys`` keys; then the keyed
claim's worst case: ``--backlog`` jobs of one key already at its limit ahead of the rest
in claim order (each claim scans past them).

Usage: python scripts/bench/keyed_claim.py [--jobs 20000] [--keys 100] [--batch 10]
       [--claims 300] [--per-key 2] [--backlog 20000]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

from shared.enqueue import enqueue_many
from supervisor.db import Completion, Store


def claim_loop(dsn: str, claims: int, batch: int, per_key: int | None) -> float:
    """Median milliseconds of one claim of ``batch`` jobs (each batch then completed)."""
    times = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        store = Store(conn, "bench", 30.0)
        for _ in range(claims):
            started = time.perf_counter()
            jobs = store.claim("keyed", ["run_noop"], batch, per_key=per_key)
            times.append((time.perf_counter() - started) * 1000)
            store.complete([Completion(j.id, j.attempt, None) for j in jobs])
    return common.median(times)


def behind_a_saturated_key(dsn: str, backlog: int, batch: int, claims: int,
                           per_key: int) -> float:
    """Median ms of a keyed claim when ``backlog`` jobs of one key at its limit come
    first in claim order."""
    common.reset(dsn)
    enqueue_many("run_noop", [{}] * backlog, queue="keyed", dsn=dsn, concurrency_key="big")
    enqueue_many("run_noop", [{}] * (batch * claims), queue="keyed", dsn=dsn,
                 concurrency_keys=[f"k{i % 100}" for i in range(batch * claims)])
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE supervisor.jobs")
        Store(conn, "holder", 30.0).claim("keyed", ["run_noop"], per_key, per_key=per_key)
    return claim_loop(dsn, claims, batch, per_key)


def run(base_dsn: str, jobs: int, keys: int, batch: int, claims: int,
        per_key: int, backlog: int) -> list[tuple[str, str]]:
    dsn = common.scratch_database(base_dsn, "supervisor_bench_keyed")
    rows = []
    try:
        for label, limit in (("plain claim", None), (f"keyed claim, per key {per_key}",
                                                     per_key)):
            common.reset(dsn)
            enqueue_many("run_noop", [{}] * jobs, queue="keyed", dsn=dsn,
                         concurrency_keys=[f"k{i % keys}" for i in range(jobs)])
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("VACUUM ANALYZE supervisor.jobs")
            ms = claim_loop(dsn, claims, batch, limit)
            rows.append((f"{label}: batch {batch}, {jobs:,} available jobs over {keys} keys",
                         f"{ms:.2f} ms per claim (median of {claims})"))
        ms = behind_a_saturated_key(dsn, backlog, batch, claims, per_key)
        rows.append((f"keyed claim, batch {batch}, behind {backlog:,} jobs of one key at its "
                     "limit", f"{ms:.2f} ms per claim (median of {claims})"))
    finally:
        common.drop_database(base_dsn, "supervisor_bench_keyed")
    return rows


if __name__ == "__main__":
    common.cli(run, __doc__.splitlines()[0], jobs=20_000, keys=100, batch=10, claims=300,
               per_key=2, backlog=20_000)
