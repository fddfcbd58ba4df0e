"""Acting on a 100,000-member batch as one thing (issue 42): how long each action takes
and what a cancel leaves behind.

On a scratch database:
  1. a batch of ``--jobs`` no-op members nobody serves: ``reprioritize``, ``pause``,
     ``resume`` (each in 1000-member transactions);
  2. the same batch size served by ``supervisor run -n 2``: once ``--warm`` members
     completed, ``Batch.cancel()``. Reported: its wall time, the members it changed, the
     callbacks enqueued (must be 1), the longest single chunk transaction (sampled from
     pg_stat_activity every 10 ms), and how many members completed after the cancel
     returned (claimed before the stop; at most the children).

Also: what the claim guard costs a claim, per member it marks running.

Usage: python scripts/bench/batch_cancel.py [--dsn DSN] [--jobs 100000] [--warm 500]
"""

from __future__ import annotations

import os
import subprocess
import threading
import time

import common
import psycopg

from shared.batches import Callback
from shared.enqueue import enqueue_many

QUEUE = "bench"
DATABASE = "supervisor_bench_batch_cancel"


class LongestXact:
    """The longest transaction seen on the database by a non-supervisor client."""

    def __init__(self, dsn: str) -> None:
        self.dsn, self.longest = dsn, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> LongestXact:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self._stop.is_set():
                row = conn.execute(
                    "SELECT max(extract(epoch FROM clock_timestamp() - xact_start)) "
                    "FROM pg_stat_activity WHERE datname = current_database() "
                    "AND pid <> pg_backend_pid() AND application_name = 'bench-actor' "
                    "AND state <> 'idle'").fetchone()
                self.longest = max(self.longest, row[0] or 0.0)
                time.sleep(0.01)


def guard_cost(dsn: str, jobs: int, rounds: int = 5) -> tuple[float, float]:
    """Microseconds per member marked running by one UPDATE (a claim's write), with the
    claim guard of 0025 enabled and disabled, medians of alternated rounds."""
    times: dict[bool, list[float]] = {True: [], False: []}
    common.reset(dsn)
    batch = enqueue_many("run_noop", [{}] * jobs, queue=QUEUE, dsn=dsn,
                         then=Callback("run_noop", {}, queue=QUEUE))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE supervisor.jobs")
        for _ in range(rounds):
            for enabled in (True, False):
                how = "ENABLE" if enabled else "DISABLE"
                conn.execute(f"ALTER TABLE supervisor.jobs {how} TRIGGER jobs_batch_claim_guard")
                with conn.transaction():
                    t0 = time.perf_counter()
                    conn.execute("UPDATE supervisor.jobs SET state = 'running' "
                                 "WHERE batch_id = %s AND state = 'available'", (batch.id,))
                    times[enabled].append((time.perf_counter() - t0) / jobs * 1e6)
                    conn.execute("UPDATE supervisor.jobs SET state = 'available' "
                                 "WHERE batch_id = %s", (batch.id,))
        conn.execute("ALTER TABLE supervisor.jobs ENABLE TRIGGER jobs_batch_claim_guard")
    return common.median(times[True]), common.median(times[False])


def run(dsn: str, jobs: int, warm: int):
    dsn = common.scratch_database(dsn, DATABASE)
    actor = dsn + " application_name=bench-actor"
    with_guard, without = guard_cost(dsn, jobs)
    yield ("a claim's write of a member, guard on / off (one UPDATE of every member)",
           f"{with_guard:.1f} / {without:.1f} µs a member")
    common.reset(dsn)
    batch = enqueue_many("run_noop", [{}] * jobs, queue=QUEUE, dsn=dsn,
                         then=Callback("run_noop", {}, queue=QUEUE))
    with psycopg.connect(dsn, autocommit=True) as conn:
        # As autovacuum would soon after 100,000 inserts; with the statistics of the
        # empty table, resume's chunks are planned through the run_at index and sorted
        # (about 20 s for the 100,000 instead of 3, measured).
        conn.execute("ANALYZE supervisor.jobs")
    batch.dsn = actor
    for label, act in (("reprioritize", lambda: batch.reprioritize(5)),
                       ("pause", batch.pause), ("resume", batch.resume)):
        with LongestXact(dsn) as watch:
            done = act()
        yield (f"{label}, {jobs:,} idle members",
               f"{done.seconds:.2f} s ({done.changed:,} changed, longest transaction "
               f"{watch.longest * 1000:.0f} ms)")

    common.reset(dsn)
    batch = enqueue_many("run_noop", [{}] * jobs, queue=QUEUE, dsn=dsn,
                         then=Callback("run_noop", {}, queue=QUEUE))
    batch.dsn = actor
    env = common.supervisor_env(dsn)
    proc = subprocess.Popen(common.supervisor_cmd("-n", "2", "-q", QUEUE), env=env,
                            cwd=env["PYTHONPATH"].split(os.pathsep)[0],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while common.count_state(dsn, "completed") < warm:
                time.sleep(0.05)
            with LongestXact(dsn) as watch:
                done = batch.cancel()
            returned = conn.execute("SELECT now()").fetchone()[0]
            deadline = time.monotonic() + 60
            while batch.summary().callback_id is None and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(1.0)
            after = conn.execute("SELECT count(*) FROM supervisor.jobs WHERE batch_id = %s "
                                 "AND state = 'completed' AND finished_at > %s",
                                 (batch.id, returned)).fetchone()[0]
            callbacks = conn.execute("SELECT count(*) FROM supervisor.jobs "
                                     "WHERE batch_id IS NULL").fetchone()[0]
            s = batch.summary()
    finally:
        proc.terminate()
        proc.wait(30)
    yield (f"cancel, {jobs:,} members, 2 children running them",
           f"{done.seconds:.2f} s ({done.changed:,} cancelled, longest transaction "
           f"{watch.longest * 1000:.0f} ms)")
    yield ("callbacks enqueued / members completed after the cancel returned",
           f"{callbacks} / {after} (completed {s.completed:,}, cancelled {s.cancelled:,})")
    yield ("machine", common.machine()["load"])
    common.drop_database(common.DEFAULT_DSN, DATABASE)


if __name__ == "__main__":
    common.cli(run, __doc__.splitlines()[0], jobs=100_000, warm=500)
