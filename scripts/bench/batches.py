"""Batch bookkeeping: draining no-op jobs as one batch (with a callback) against the
same jobs without a batch, in the same run, with two ``supervisor run -n 2 --burst``
started together (so two parents complete members of the batch in parallel).

Three variants, alternated ``--runs`` times on a scratch database:
  * plain: ``enqueue_many`` without ``then``;
  * batch: the same jobs with ``then=`` (the callback is one more no-op job);
  * plain, trigger off: the 0006 trigger disabled, what plain jobs pay for its presence.
Also reported: how often the batch's completions were seen waiting on the per-batch
lock (pg_stat_activity sampled every 20 ms), and how many times the batches row was
updated (1: nothing is counted per member, so there is no hot row).

Usage: python scripts/bench/batches.py [--dsn DSN] [--jobs 100000] [--runs 2]
       [--supervisors 2]
"""

from __future__ import annotations

import threading
import time

import common
import psycopg

from shared.batches import Callback
from shared.enqueue import enqueue_many

QUEUE = "bench"


class LockSampler:
    """Counts samples of active backends, and of those waiting on an advisory lock."""

    def __init__(self, dsn: str) -> None:
        self.dsn, self.active, self.waiting = dsn, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> LockSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self._stop.wait(0.02):
                active, waiting = conn.execute(
                    "SELECT count(*) FILTER (WHERE state = 'active'), "
                    "count(*) FILTER (WHERE wait_event = 'advisory') FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                ).fetchone()
                self.active += active
                self.waiting += waiting


def drain(dsn: str, supervisors: int) -> float:
    """Seconds until ``supervisors`` burst supervisors (-n 2 each), started together,
    have all exited."""
    started = time.perf_counter()
    threads = [threading.Thread(target=common.run_burst, args=(dsn, "-n", "2", "-q", QUEUE))
               for _ in range(supervisors)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - started


def one_run(dsn: str, jobs: int, variant: str, supervisors: int) -> tuple[float, LockSampler]:
    common.reset(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE supervisor.batches")
        trigger = "DISABLE" if variant == "plain, trigger off" else "ENABLE"
        conn.execute(f"ALTER TABLE supervisor.jobs {trigger} TRIGGER jobs_after_update")
    then = Callback("run_noop", {}, queue=QUEUE) if variant == "batch" else None
    enqueue_many("run_noop", [{}] * jobs, queue=QUEUE, then=then, dsn=dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ANALYZE supervisor.jobs")
    with LockSampler(dsn) as sampler:
        seconds = drain(dsn, supervisors)
    done = common.count_state(dsn, "completed")
    expected = jobs + (1 if variant == "batch" else 0)
    assert done == expected, (variant, done, expected)
    if variant == "batch":
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute("SELECT callback_id FROM supervisor.batches").fetchone()
            assert row and row[0] is not None, "the batch did not close"
    return jobs / seconds, sampler


def batch_row_updates(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_force_next_flush()")
        return conn.execute("SELECT n_tup_upd FROM pg_stat_user_tables "
                            "WHERE schemaname = 'supervisor' AND relname = 'batches'"
                            ).fetchone()[0]


def run(dsn: str, jobs: int, runs: int, supervisors: int) -> list[tuple[str, str]]:
    variants = ("plain", "batch", "plain, trigger off")
    rates: dict[str, list[float]] = {v: [] for v in variants}
    waits = active = 0
    for _ in range(runs):
        for variant in variants:
            rate, sampler = one_run(dsn, jobs, variant, supervisors)
            rates[variant].append(rate)
            if variant == "batch":
                waits += sampler.waiting
                active += sampler.active
    time.sleep(0.6)  # statistics reach pg_stat_user_tables after their flush interval
    plain, batch = common.median(rates["plain"]), common.median(rates["batch"])
    off = common.median(rates["plain, trigger off"])
    rows = [(f"{jobs:,} no-op jobs, {supervisors} x run -n 2, {variant}",
             f"{common.median(rates[variant]):,.0f} jobs/s "
             f"(runs: {', '.join(f'{r:,.0f}' for r in rates[variant])})") for variant in variants]
    rows.append(("batch bookkeeping cost vs plain", f"{(1 - batch / plain) * 100:.1f}%"))
    rows.append(("trigger's cost on plain jobs (vs trigger off)",
                 f"{(1 - plain / off) * 100:.1f}%"))
    rows.append(("active-backend samples waiting on the batch lock (batch runs)",
                 f"{waits} of {active}"))
    rows.append((f"updates of the batches row over {runs} batch runs", str(batch_row_updates(dsn))))
    return rows


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=common.DEFAULT_DSN)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--supervisors", type=int, default=2)
    args = parser.parse_args()
    name = "supervisor_bench_batches"
    dsn = common.scratch_database(args.dsn, name)
    try:
        for label, value in run(dsn, args.jobs, args.runs, args.supervisors):
            print(f"| {label} | {value} |")
    finally:
        common.drop_database(args.dsn, name)


if __name__ == "__main__":
    main()
