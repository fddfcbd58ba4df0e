"""Issue 49's table: how long short jobs wait for an idle child while a long job runs.

``supervisor run -n N`` (defaults, one queue) gets one job of ``--long`` seconds (a
sleep); ``--after`` seconds into it, four jobs of 0.3 s of the same kind arrive. Reported:
the time from their commit to the first one's claim (``attempted_at``, stamped by the
claim), per ``-n`` and per kind history: ``cold`` (the supervisor has finished no job of
the kind) and ``warm`` (one short job of it finished first). Before issue 49's fix the
cold ``-n 2`` cell read 6.2-6.5 s (the long job's remaining time): the stuck child's job
was counted against the one free child's allotment.

Usage: python scripts/bench/idle_child.py [--runs 3] [--children 2,3,4] [--long 8]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import psycopg
from common import DEFAULT_DSN, ROOT, drop_database, machine, scratch_database

TESTS = ROOT / "tests"


def wait_for(conn: psycopg.Connection, sql: str, params: tuple, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not conn.execute(sql, params).fetchone()[0]:
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out: {sql}")
        time.sleep(0.005)


def one_run(base: str, children: int, warm: bool, long_s: float, after: float) -> float:
    dsn = scratch_database(base, "bench_idle_child")
    env = dict(os.environ, SUPERVISOR_DSN=dsn,
               PYTHONPATH=os.pathsep.join([str(TESTS), str(ROOT)]))
    proc = subprocess.Popen([sys.executable, "-m", "supervisor", "run", "-n", str(children),
                             "--app", "e2e_handlers"], env=env, cwd=str(TESTS),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            insert = ("INSERT INTO supervisor.jobs (kind, queue, args) VALUES "
                      "('e2e_sleep', 'default', %s) RETURNING id")
            if warm:
                (warm_id,) = conn.execute(insert, ('{"seconds": 0.01}',)).fetchone()
                wait_for(conn, "SELECT state = 'completed' FROM supervisor.jobs WHERE id = %s",
                         (warm_id,))
            (long_id,) = conn.execute(insert, (f'{{"seconds": {long_s}}}',)).fetchone()
            wait_for(conn, "SELECT state = 'running' FROM supervisor.jobs WHERE id = %s",
                     (long_id,))
            time.sleep(after)
            (committed,) = conn.execute("SELECT clock_timestamp()").fetchone()
            conn.execute("INSERT INTO supervisor.jobs (kind, queue, args) SELECT "
                         "'e2e_sleep', 'default', '{\"seconds\": 0.3}' "
                         "FROM generate_series(1, 4)")
            wait_for(conn, "SELECT min(attempted_at) IS NOT NULL FROM supervisor.jobs "
                     "WHERE id > %s", (long_id,), timeout=long_s + 30)
            (first,) = conn.execute("SELECT min(attempted_at) FROM supervisor.jobs "
                                    "WHERE id > %s", (long_id,)).fetchone()
            return (first - committed).total_seconds()
    finally:
        proc.kill()
        proc.wait()
        drop_database(base, "bench_idle_child")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--children", default="2,3,4")
    parser.add_argument("--long", type=float, default=8.0)
    parser.add_argument("--after", type=float, default=1.5)
    args = parser.parse_args()
    print(machine())
    print("| -n | kind not yet measured | kind measured |")
    print("|---|---|---|")
    for n in (int(x) for x in args.children.split(",")):
        cells = []
        for warm in (False, True):
            waits = [one_run(args.dsn, n, warm, args.long, args.after)
                     for _ in range(args.runs)]
            cells.append(f"{statistics.median(waits):.3f} s (max {max(waits):.3f})")
        print(f"| {n} | {cells[0]} | {cells[1]} |", flush=True)


if __name__ == "__main__":
    main()
