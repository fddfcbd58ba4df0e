"""joblib/loky across jobs (issue 45): how long one ``Parallel`` call of trivial tasks on
two loky workers takes in each job of a child, with loky's workers kept by the child
(``workers.joblib_config``) and killed after every job (plain ``parallel_config``, the
behaviour before issue 45).

``--jobs`` jobs per variant (``peer_apps/loky_jobs.py``, ``n_jobs=2``) run through
``supervisor run -n 1 --burst``, so every job runs in the one child, one after another.
Reported per variant: the first job's call (loky's cold start), the second's, and the
median and 95th percentile of the calls after the first.

Usage: python scripts/bench/loky_warm.py [--dsn DSN] [--jobs 30]
"""

from __future__ import annotations

import os
import subprocess
import sys

import common
import psycopg

from shared.enqueue import enqueue_many

APPS = common.BENCH / "peer_apps"


def calls(dsn: str, jobs: int, kept: bool) -> list[float]:
    """Each job's ``Parallel`` call, in seconds, in the order the jobs ran."""
    common.reset(dsn)
    enqueue_many("loky_call", [{"kept": kept}] * jobs, queue="loky", dsn=dsn)
    env = common.supervisor_env(dsn)
    env["PYTHONPATH"] = os.pathsep.join([str(APPS), env["PYTHONPATH"]])
    done = subprocess.run([sys.executable, "-m", "supervisor", "run", "--app", "loky_jobs",
                           "--log-level", "warning", "--burst", "-n", "1",
                           "--poll-interval", "0.1"], env=env, capture_output=True,
                          text=True, timeout=900, cwd=str(APPS))
    if done.returncode != 0:
        raise SystemExit(f"supervisor run failed:\n{done.stderr[-2000:]}")
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT state, result FROM supervisor.jobs "
                            "ORDER BY id").fetchall()
    if any(state != "completed" for state, _result in rows):
        raise SystemExit("not every job completed")
    return [result["seconds"] for _state, result in rows]


def run(dsn: str, jobs: int):
    scratch = common.scratch_database(dsn, "bench_loky_warm")
    try:
        variants = {"kept by the child (joblib_config)": calls(scratch, jobs, True),
                    "killed after each job (parallel_config)": calls(scratch, jobs, False)}
    finally:
        common.drop_database(dsn, "bench_loky_warm")
    yield "machine", common.machine(dsn)
    for name, seconds in variants.items():
        later = seconds[1:]
        yield f"{name}: first / second job's call", (
            f"{seconds[0] * 1000:.0f} ms / {seconds[1] * 1000:.1f} ms")
        yield f"{name}: the first five jobs' calls", " / ".join(
            f"{x * 1000:.1f} ms" for x in seconds[:5])
        yield f"{name}: jobs 2-{jobs}, median / p95", (
            f"{common.median(later) * 1000:.1f} ms / "
            f"{common.percentile(later, 95) * 1000:.1f} ms")


if __name__ == "__main__":
    common.cli(run, __doc__.split("\n\n")[0], jobs=30)
