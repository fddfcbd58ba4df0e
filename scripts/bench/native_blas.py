"""Native thread pools: a numpy pipeline through ``supervisor run -n 2`` at its
defaults (``native_threads = auto``), against ``multiprocessing.Pool(2)`` with one
BLAS thread per worker (threadpoolctl in its initializer), side by side in one run; and
``supervisor run -n 2 --native-threads off`` (each child's OpenBLAS starting one thread
per core) to show what the setting saves.

Each variant runs ``--jobs`` jobs (100) of 50 products of 300x300 matrices
(``peer_apps/native_blas_jobs.py``; numpy imported by the app module in the parent,
before the fork). Supervisor runs are timed from ``exec`` to the exit of ``--burst``
with the jobs enqueued before; the Pool from its creation to the last result. The
variants alternate ``--rounds`` times so load that comes and goes falls on all alike;
the median of each is reported, and the ratio of ours to the Pool's.

Usage: python scripts/bench/native_blas.py [--dsn DSN] [--jobs 100] [--rounds 1] [--off 1]
(``--off 0`` skips the oversubscribed variant, which takes many times longer.)
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time

import common

from shared.enqueue import enqueue_many

APPS = common.BENCH / "peer_apps"
sys.path.insert(0, str(APPS))


def one_blas_thread() -> None:
    import threadpoolctl

    threadpoolctl.threadpool_limits(1, user_api="blas")


def pool_run(jobs: int) -> float:
    from native_blas_jobs import products

    t0 = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(2, initializer=one_blas_thread) as pool:
        pool.map(products, range(jobs), chunksize=1)
    return time.perf_counter() - t0


_POOL_SCRIPT = """
import multiprocessing, sys
import threadpoolctl
from native_blas_jobs import products
def one_blas_thread():
    threadpoolctl.threadpool_limits(1, user_api="blas")
with multiprocessing.get_context("fork").Pool(2, initializer=one_blas_thread) as pool:
    pool.map(products, range(int(sys.argv[1])), chunksize=1)
"""


def pool_exec_run(jobs: int) -> float:
    """The Pool as a user's script runs it: timed from ``exec``, so it pays the
    interpreter's start and numpy's import as ``supervisor run`` does."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(APPS), os.environ.get(
        "PYTHONPATH", "")]))
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", _POOL_SCRIPT, str(jobs)], env=env, check=True,
                   cwd=str(APPS), timeout=600)
    return time.perf_counter() - t0


def ours(dsn: str, jobs: int, *args: str) -> float:
    common.reset(dsn)
    enqueue_many("blas_products", [{"seed": i} for i in range(jobs)], queue="blas", dsn=dsn)
    env = common.supervisor_env(dsn)
    env["PYTHONPATH"] = os.pathsep.join([str(APPS), env["PYTHONPATH"]])
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "supervisor", "run", "--app",
                           "native_blas_jobs", "--log-level", "warning", "--burst", "-n", "2",
                           "--poll-interval", "0.1", *args], env=env, capture_output=True,
                          text=True, timeout=600, cwd=str(APPS))
    elapsed = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"supervisor run failed:\n{done.stderr[-2000:]}")
    if common.count_state(dsn, "completed") != jobs:
        raise SystemExit("not every job completed")
    return elapsed


def run(dsn: str, jobs: int, rounds: int, off: int):
    scratch = common.scratch_database(dsn, "bench_native_blas")
    times: dict[str, list[float]] = {"pool": [], "pool_exec": [], "ours": [], "off": []}
    try:
        for _ in range(rounds):
            times["pool"].append(pool_run(jobs))
            times["pool_exec"].append(pool_exec_run(jobs))
            times["ours"].append(ours(scratch, jobs))
            if off:
                times["off"].append(ours(scratch, jobs, "--native-threads", "off"))
    finally:
        common.drop_database(dsn, "bench_native_blas")
    pool, mine = common.median(times["pool"]), common.median(times["ours"])
    yield "machine", common.machine(dsn)
    pool_exec = common.median(times["pool_exec"])
    yield f"multiprocessing.Pool(2), 1 BLAS thread each, {jobs} jobs", f"{pool:.2f} s"
    yield "the same Pool as a script, from exec", f"{pool_exec:.2f} s"
    yield "supervisor run -n 2 (native_threads auto), from exec", (
        f"{mine:.2f} s ({mine / pool:.2f}x Pool, {mine / pool_exec:.2f}x the script)")
    if off:
        slow = common.median(times["off"])
        yield "supervisor run -n 2 --native-threads off", f"{slow:.2f} s ({slow / pool:.2f}x Pool)"
    yield "every round (pool / script / ours)", "; ".join(
        f"{p:.2f} / {e:.2f} / {o:.2f}"
        for p, e, o in zip(times["pool"], times["pool_exec"], times["ours"], strict=True))


if __name__ == "__main__":
    common.cli(run, __doc__.split("\n\n")[0], jobs=100, rounds=1, off=1)
