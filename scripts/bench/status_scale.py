"""``supervisor status`` on a table that keeps its history: seconds per call, and what
it said about the finished jobs.

Seeds a scratch database with ``--finished`` completed jobs (8 queues, finished over the
last day, as the retention keeps them) beside ``--live`` available ones, analyzes it,
then times ``supervisor status --json`` as a subprocess (``--repeat`` calls each, the
median and the slowest), plain and with ``--count-finished`` where the checkout has it.
``--code DIR [DIR ...]``: each checkout in turn on the same table (the schema is the
same). ``--index`` also creates the optional ``jobs_state_queue_idx`` of
docs/dashboard.md and times again.

    python scripts/bench/status_scale.py [--finished 5000000] [--live 1000] [--repeat 5]
        [--code DIR ...] [--index]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import common
import orjson
import psycopg

NAME = "supervisor_bench_status_scale"

_SEED = """
INSERT INTO supervisor.jobs (kind, queue, state, attempt, attempted_at, finished_at)
SELECT 'k' || (g %% 40), 'q' || (g %% 8), 'completed', 1,
       now() - interval '1 day' + g * %(step)s * interval '1 second',
       now() - interval '1 day' + g * %(step)s * interval '1 second'
FROM generate_series(1, %(n)s) AS g
"""
_LIVE = """
INSERT INTO supervisor.jobs (kind, queue) SELECT 'k' || (g %% 40), 'q' || (g %% 8)
FROM generate_series(1, %(n)s) AS g
"""


def time_status(dsn: str, code: str, *flags: str) -> tuple[float, dict]:
    """Seconds of one ``supervisor status --json`` of the checkout ``code``, and its
    JSON."""
    env = dict(os.environ, PYTHONPATH=code)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "supervisor", "status", "--json",
                           "--dsn", dsn, *flags], env=env, cwd=code, capture_output=True,
                          timeout=900, check=True)
    return time.perf_counter() - t0, orjson.loads(done.stdout)


def describe(snapshot: dict) -> str:
    finished = snapshot.get("finished") or {"counted": True}
    completed = sum((q["counts"].get("completed") or 0) for q in snapshot["queues"])
    available = sum(q["counts"]["available"] for q in snapshot["queues"])
    said = f"{completed:,} completed" if finished["counted"] else "finished not counted"
    return f"{available:,} available, {said}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=common.DEFAULT_DSN)
    parser.add_argument("--finished", type=int, default=5_000_000)
    parser.add_argument("--live", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--code", nargs="*", default=[str(common.ROOT)])
    parser.add_argument("--index", action="store_true")
    args = parser.parse_args()

    dsn = common.scratch_database(args.dsn, NAME)
    try:
        t0 = time.perf_counter()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(_SEED, {"n": args.finished, "step": 86400.0 / args.finished})
            conn.execute(_LIVE, {"n": args.live})
            conn.execute("VACUUM ANALYZE supervisor.jobs")
            size = conn.execute("SELECT pg_size_pretty(pg_total_relation_size("
                                "'supervisor.jobs'))").fetchone()
        print(f"seeded {args.finished:,} finished and {args.live:,} available jobs "
              f"({size[0] if size else '?'} with indexes) in {time.perf_counter() - t0:.0f} s")
        print(common.machine(args.dsn))
        print("| code | index | call | median s | slowest s | said |")
        print("|---|---|---|---|---|---|")
        for indexed in ([False, True] if args.index else [False]):
            if indexed:
                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute("CREATE INDEX IF NOT EXISTS jobs_state_queue_idx "
                                 "ON supervisor.jobs (state, queue)")
                    conn.execute("VACUUM ANALYZE supervisor.jobs")
            for code in args.code:
                has_flag = "--count-finished" in (
                    Path(code) / "supervisor" / "cli" / "status.py").read_text()
                for flags in ([], ["--count-finished"]) if has_flag else ([],):
                    runs = [time_status(dsn, code, *flags) for _ in range(args.repeat)]
                    seconds = [s for s, _ in runs]
                    print(f"| {Path(code).name} | {'yes' if indexed else 'no'} | "
                          f"status {' '.join(flags)} | {statistics.median(seconds):.2f} | "
                          f"{max(seconds):.2f} | {describe(runs[-1][1])} |", flush=True)
    finally:
        common.drop_database(args.dsn, NAME)


if __name__ == "__main__":
    main()
