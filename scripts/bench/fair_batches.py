"""Two batches sharing one queue (issue 42): a queue with ``fair = "batch"`` against the
same queue without it, through real ``supervisor run`` processes.

On a scratch database, for each of the two queue settings:
  1. batch A (``--jobs`` equal CPU jobs of ``--n`` loop iterations) is enqueued and a
     supervisor (``-n --children``) starts on it; once ``--warm`` of A completed, batch
     B (as many jobs) is enqueued. Reported: how long after B's enqueue its first job
     started, in job lengths (the median run of the jobs); each batch's completion rate
     while both had jobs waiting (from B's first start to the first moment either batch
     had none left to start), and their ratio;
  2. one batch alone (``--jobs``): the children's busy share (job run time over the
     span from the first start to the last end, times the children): the fair claim
     must keep every child busy as the plain one does;
  3. instead, with ``--newcomers K`` (fair queue only): while batch A runs, K batches of two
     jobs each are enqueued about half a second apart; each one's first start after
     its commit, in job lengths: median, p90 and max. One B per run is a single
     sample whose spread is the children's phase; this is the distribution.

Each job reports its own start and end (``run_cpu_timed``), so the figures are the
children's, not the database's.

Usage: python scripts/bench/fair_batches.py [--dsn DSN] [--jobs 20000] [--n 30000]
       [--children 2] [--warm 500] [--prefetch auto|N] [--newcomers 0]
"""

from __future__ import annotations

import os
import subprocess
import time

import common
import psycopg

from shared.batches import Batch, Callback
from shared.enqueue import enqueue_many

QUEUE = "bench_timed"
DATABASE = "supervisor_bench_fair_batches"


def start_supervisor(dsn: str, children: int, fair: bool, prefetch: str) -> subprocess.Popen:
    env = common.supervisor_env(dsn)
    args = ["-n", str(children), "-q", QUEUE, "-q", "bench", "--prefetch", prefetch]
    if fair:
        args += ["--queue-setting", f"{QUEUE}.fair=batch"]
    return subprocess.Popen(common.supervisor_cmd(*args), env=env,
                            cwd=env["PYTHONPATH"].split(os.pathsep)[0],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def a_batch(dsn: str, jobs: int, n: int) -> Batch:
    return enqueue_many("run_cpu_timed", [{"n": n}] * jobs, queue=QUEUE, dsn=dsn,
                        then=Callback("run_noop", {}, queue="bench"))


def completed(conn: psycopg.Connection, batch: Batch) -> int:
    return conn.execute("SELECT count(*) FROM supervisor.jobs WHERE batch_id = %s AND "
                        "state = 'completed'", (batch.id,)).fetchone()[0]


def runs(conn: psycopg.Connection, batch: Batch) -> list[tuple[float, float]]:
    """(start, end) of each member, epoch seconds, as the child measured them."""
    return [(r[0][3], r[0][4]) for r in conn.execute(
        "SELECT result FROM supervisor.jobs WHERE batch_id = %s AND state = 'completed'",
        (batch.id,))]


def wait_done(conn: psycopg.Connection, batches: list[Batch], timeout: float = 1800) -> None:
    deadline = time.monotonic() + timeout
    while any(b.summary().callback_id is None for b in batches):
        if time.monotonic() > deadline:
            raise SystemExit("the batches did not finish in time")
        time.sleep(0.5)


def two_batches(dsn: str, jobs: int, n: int, children: int, warm: int, fair: bool,
                prefetch: str):
    common.reset(dsn)
    first = a_batch(dsn, jobs, n)
    proc = start_supervisor(dsn, children, fair, prefetch)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while completed(conn, first) < warm:
                time.sleep(0.05)
            second = a_batch(dsn, jobs, n)
            enqueued = time.time()  # committed: from here a claim may take its jobs
            wait_done(conn, [first, second])
            a, b = runs(conn, first), runs(conn, second)
    finally:
        proc.terminate()
        proc.wait(60)
    length = common.median([end - start for start, end in a + b])
    b_first = min(start for start, _ in b)
    # Both wait from B's first start until either batch has started its last job.
    both_until = min(max(start for start, _ in a), max(start for start, _ in b))
    span = max(both_until - b_first, 1e-9)
    rate_a = sum(1 for _, end in a if b_first <= end <= both_until) / span
    rate_b = sum(1 for _, end in b if b_first <= end <= both_until) / span
    label = ("fair = \"batch\"" if fair else "plain queue") + f", prefetch {prefetch}"
    yield (f"{label}: B's first start after its enqueue",
           f"{b_first - enqueued:.3f} s = {(b_first - enqueued) / length:.1f} job lengths "
           f"(median job {length * 1000:.1f} ms)")
    if span > 1e-6 and rate_a + rate_b > 0:
        yield (f"{label}: completions/s while both wait (A / B, over {span:.1f} s)",
               f"{rate_a:.0f} / {rate_b:.0f} (B/A = {rate_b / max(rate_a, 1e-9):.3f})")
    else:
        yield (f"{label}: completions/s while both wait", "never both waiting: A ran first")


def alone(dsn: str, jobs: int, n: int, children: int, fair: bool, prefetch: str):
    common.reset(dsn)
    batch = a_batch(dsn, jobs, n)
    proc = start_supervisor(dsn, children, fair, prefetch)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            wait_done(conn, [batch])
            done = runs(conn, batch)
    finally:
        proc.terminate()
        proc.wait(60)
    span = max(end for _, end in done) - min(start for start, _ in done)
    busy = sum(end - start for start, end in done) / (span * children)
    label = ("fair = \"batch\"" if fair else "plain queue") + f", prefetch {prefetch}"
    return label, span, busy


def newcomer_waits(dsn: str, count: int, jobs: int, n: int, children: int, warm: int,
                   prefetch: str):
    """``count`` two-job batches enqueued one by one into a fair queue busy with batch A
    (left unfinished when they are done); each one's first start after its commit."""
    common.reset(dsn)
    first = a_batch(dsn, max(jobs, 20_000), n)
    proc = start_supervisor(dsn, children, True, prefetch)
    waits: list[float] = []
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while completed(conn, first) < warm:
                time.sleep(0.05)
            commits = []
            for i in range(count):
                time.sleep(0.5 + (i % 5) * 0.037)  # not in step with the jobs
                commits.append((a_batch(dsn, 2, n), time.time()))
            for batch, _ in commits:
                deadline = time.monotonic() + 120
                while completed(conn, batch) < 2 and time.monotonic() < deadline:
                    time.sleep(0.05)
            length = common.median([end - start for start, end in runs(conn, first)])
            for batch, committed in commits:
                starts = [start for start, _ in runs(conn, batch)]
                if starts:
                    waits.append((min(starts) - committed) / length)
    finally:
        proc.terminate()
        proc.wait(60)
    if not waits:
        raise SystemExit("no newcomer ran")
    yield (f"fair = \"batch\", prefetch {prefetch}: {len(waits)} newcomers' first start "
           "after their commit",
           f"median {common.median(waits):.2f}, p90 {common.percentile(waits, 90):.2f}, "
           f"max {max(waits):.2f} job lengths (median job {length * 1000:.1f} ms)")


def run(dsn: str, jobs: int, n: int, children: int, warm: int, prefetch: str,
        newcomers: int = 0):
    dsn = common.scratch_database(dsn, DATABASE)
    if newcomers:
        yield from newcomer_waits(dsn, newcomers, jobs, n, children, warm, prefetch)
        common.drop_database(common.DEFAULT_DSN, DATABASE)
        return
    for fair in (True, False):
        yield from two_batches(dsn, jobs, n, children, warm, fair, prefetch)
    spans = {}
    for fair in (True, False):
        label, span, busy = alone(dsn, jobs, n, children, fair, prefetch)
        spans[fair] = span
        yield (f"{label}: one batch of {jobs:,} alone, {children} children",
               f"{span:.1f} s, children busy {100 * busy:.1f}% of it")
    yield ("one batch alone, fair against plain", f"{spans[True] / spans[False]:.3f}x the time")
    yield ("machine", common.machine()["load"])
    common.drop_database(common.DEFAULT_DSN, DATABASE)


if __name__ == "__main__":
    common.cli(run, __doc__.splitlines()[0], jobs=20_000, n=30_000, children=2, warm=500,
               prefetch="auto", newcomers=0)
