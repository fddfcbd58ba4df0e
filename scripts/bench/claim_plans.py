"""What planning costs a claim: the server's CPU per claim on the non-blocking claim
connection, each claim taking ``B`` jobs and carrying the ``B`` completions of the
claim before it, under three ways of planning it:

* ``custom``: an unnamed statement, planned for its parameters every time (how claims
  carrying more than ``CACHED_PLAN_BATCH`` writes ran until 2026-12-06);
* ``auto``: a prepared statement under PostgreSQL's own choice (``plan_cache_mode =
  auto``; for a claim carrying writes it kept planning a custom plan each time);
* ``generic``: a prepared statement on its generic plan (``force_generic_plan``, what
  ``Database`` sets on the claim connection now).

The backend's CPU is read from ``/proc/<pid>/stat`` around ``--claims`` claims in a row,
on a queue holding ``--backlog`` jobs (at least enough for every claim).

Usage: python scripts/bench/claim_plans.py [--sizes 1,16,32,128,512] [--claims 600]
       [--backlog 0]
"""

from __future__ import annotations

import argparse
import os
import selectors
import sys
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

from shared.enqueue import enqueue_many
from supervisor.db import ClaimResult, Completion, Store
from supervisor.db.claim import ClaimRequest
from supervisor.db.nonblocking import NonBlockingQuery

DATABASE = "supervisor_bench_claim_plans"
MODES = {"custom": ("auto", False), "auto": ("auto", True),
         "generic": ("force_generic_plan", True)}


def backend_cpu(pid: int) -> float:
    """CPU seconds the server process ``pid`` has used (utime + stime)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(dsn: str, mode: str, size: int, claims: int, backlog: int) -> tuple[float, float]:
    """(server CPU ms, wall ms) per claim of ``size`` jobs carrying ``size`` completions."""
    plan_cache_mode, prepared = MODES[mode]
    common.reset(dsn)
    enqueue_many("k", [{}] * max(backlog, size * (claims + 2)), dsn=dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE supervisor.jobs")
        conn.execute(f"SET plan_cache_mode = {plan_cache_mode}")
        selector = selectors.DefaultSelector()
        store, runner = Store(conn, "bench"), NonBlockingQuery(conn, selector)
        runner.prepares = prepared

        def claim(request: ClaimRequest) -> ClaimResult:
            out: list = []
            store.send_claim(runner, request, out.append)
            while not out:
                for key, mask in selector.select(5):
                    key.data.handle_event(key, mask)
            if isinstance(out[0], Exception):
                raise out[0]
            return out[0]

        held = claim(ClaimRequest("default", ["k"], size)).jobs
        pid = conn.info.backend_pid
        cpu, wall = backend_cpu(pid), time.perf_counter()
        for _ in range(claims):
            done = [Completion(job.id, job.attempt, '"ok"') for job in held]
            held = claim(ClaimRequest("default", ["k"], size, completions=done)).jobs
        cpu, wall = backend_cpu(pid) - cpu, time.perf_counter() - wall
        selector.close()
    return cpu / claims * 1000, wall / claims * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=common.DEFAULT_DSN)
    parser.add_argument("--sizes", default="1,16,32,128,512")
    parser.add_argument("--claims", type=int, default=600)
    parser.add_argument("--backlog", type=int, default=0)
    args = parser.parse_args()
    dsn = common.scratch_database(args.dsn, DATABASE)
    print(f"load average before {os.getloadavg()}", flush=True)
    print("| jobs and completions per claim | mode | server CPU per claim | wall per claim |")
    print("|---|---|---|---|")
    try:
        for size in (int(s) for s in args.sizes.split(",")):
            for mode in MODES:
                cpu, wall = measure(dsn, mode, size, args.claims, args.backlog)
                print(f"| {size} | {mode} | {cpu:.2f} ms | {wall:.2f} ms |", flush=True)
    finally:
        common.drop_database(args.dsn, DATABASE)
    print(f"load average after {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()
