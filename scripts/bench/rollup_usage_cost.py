"""What adding up CPU seconds and peak memory costs the roll-up (schema 0020): the
leader's roll-up statement as shipped (``plain cast``), the careful one it falls back to
when a hand-written usage fails the cast (``guarded``), and the same statement with the
two usage figures taken out (``without``), on the same jobs, interleaved.

``--jobs`` no-op-like jobs (90,000 by default: a 15 s slice at 6,000 jobs/s) finished
within one 15 s slice, each with a usage as the supervisor writes it, on a scratch
database; each round rolls the slice once with each statement (the rollup table
emptied between) and times it. Reports the median per statement, per job, and the
load average before and after.

Usage: python scripts/bench/rollup_usage_cost.py [--jobs 90000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import common

from shared.usage_sql import usage_figure
from supervisor.db import history

DATABASE = "supervisor_bench_rollup_usage"
_SEED = """
INSERT INTO supervisor.jobs (kind, queue, state, attempt, run_at, attempted_at,
                             finished_at, usage)
SELECT 'k' || (g %% 4), 'default', 'completed', 1,
       %(t0)s::timestamptz + (g %% 14990) * interval '1 millisecond',
       %(t0)s::timestamptz + (g %% 14990) * interval '1 millisecond',
       %(t0)s::timestamptz + (g %% 14990) * interval '1 millisecond' + interval '2 ms',
       """ + common.USAGE_AS_WRITTEN_SQL + """
FROM generate_series(1, %(jobs)s) AS g
"""


def statements() -> dict[str, str]:
    """The shipped statement, its careful fallback, and the one without the figures."""
    without = history.ROLL_UP
    for key in ("cpu_seconds", "max_rss_bytes"):
        figure = usage_figure(key, "j.usage")
        if figure not in without:
            raise SystemExit("rollup_usage_cost: the usage figures moved; update this")
        without = without.replace(figure, "NULL::float8")
    return {"plain cast": history.ROLL_UP, "guarded": history.ROLL_UP_GUARDED,
            "without": without}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=common.DEFAULT_DSN)
    parser.add_argument("--jobs", type=int, default=90_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    load_before = os.getloadavg()
    dsn = common.scratch_database(args.dsn, DATABASE)
    times: dict[str, list[float]] = {name: [] for name in statements()}
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            t0 = conn.execute("SELECT date_trunc('minute', now()) - interval '10 minutes'"
                              ).fetchone()[0]
            conn.execute(_SEED, {"t0": t0, "jobs": args.jobs})
            conn.execute("VACUUM ANALYZE supervisor.jobs")
            # The mark at t0 and a 15 s slice: each statement rolls exactly the seeded jobs.
            params = history.roll_up_params(slice_seconds=15.0)
            for _ in range(args.rounds):
                for name, sql in statements().items():
                    conn.execute("TRUNCATE supervisor.job_minutes")
                    conn.execute("UPDATE supervisor.rollup_mark SET rolled_until = %s", (t0,))
                    started = time.perf_counter()
                    conn.execute(sql, params)
                    times[name].append(time.perf_counter() - started)
                    rolled = conn.execute("SELECT sum(completed) FROM supervisor.job_minutes"
                                          ).fetchone()[0]
                    assert rolled == args.jobs, (name, rolled)
    finally:
        common.drop_database(args.dsn, DATABASE)
    print(f"jobs {args.jobs}, rounds {args.rounds}, load before {load_before[0]:.1f}, "
          f"after {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs")
    for name, values in times.items():
        mid = common.median(values)
        print(f"{name:>11}: median {mid * 1000:.0f} ms ({mid / args.jobs * 1e6:.2f} µs a "
              f"job), min {min(values) * 1000:.0f} ms, max {max(values) * 1000:.0f} ms")
    for name in ("plain cast", "guarded"):
        ratio = common.median(times[name]) / common.median(times["without"])
        print(f"{name} / without: {ratio:.2f}")


if __name__ == "__main__":
    main()
