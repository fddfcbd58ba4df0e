"""How late scheduled jobs start: jobs enqueued with a delay (0.2 to 3 s) on an idle
``supervisor run -n 2`` with the default 1 s poll; lateness is the handler's start time
minus the job's ``run_at``.

Usage: python scripts/bench/lateness.py [--dsn DSN] [--probes 100]
"""

from __future__ import annotations

import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

from shared.enqueue import enqueue


def measure(dsn: str, probes: int) -> list[float]:
    """Lateness in ms of ``probes`` delayed jobs."""
    common.reset(dsn)
    log = Path(tempfile.mkstemp(prefix="late-", suffix=".log")[1])
    proc = subprocess.Popen(common.supervisor_cmd("-n", "2", "-q", "probe"),
                            env=common.supervisor_env(dsn, BENCH_PROBE_LOG=str(log)),
                            cwd=str(common.SCRIPTS), stderr=subprocess.PIPE, text=True)
    rng = random.Random(7)
    try:
        time.sleep(1.5)  # children forked and idle
        ids = []
        for _ in range(probes):
            ids.append(enqueue("run_probe", {}, queue="probe", delay=rng.uniform(0.2, 3.0),
                               dsn=dsn))
            time.sleep(0.03)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            started = dict(line.split() for line in log.read_text().splitlines())
            if len(started) >= probes:
                break
            time.sleep(0.1)
        else:
            raise SystemExit("the delayed jobs did not all run within 60 s")
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    log.unlink()
    with psycopg.connect(dsn, autocommit=True) as conn:
        due = dict(conn.execute("SELECT id, extract(epoch FROM run_at) FROM supervisor.jobs "
                                "WHERE id = ANY(%s)", (ids,)).fetchall())
    return [(float(started[str(i)]) - float(due[i])) * 1000 for i in ids]


def run(base_dsn: str = common.DEFAULT_DSN, probes: int = 100) -> list[tuple[str, str]]:
    """Rows for the report."""
    dsn = common.scratch_database(base_dsn, "supervisor_bench_lateness")
    try:
        ms = measure(dsn, probes)
    finally:
        common.drop_database(base_dsn, "supervisor_bench_lateness")
    return [(f"start of a delayed job after its run_at, idle supervisor, {probes} jobs",
             f"p50 {common.percentile(ms, 50):.1f} ms, p95 {common.percentile(ms, 95):.1f} ms,"
             f" max {max(ms):.1f} ms")]


if __name__ == "__main__":
    common.cli(run, __doc__.splitlines()[0], probes=100)
