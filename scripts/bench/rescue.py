"""Rescue time: a supervisor is killed with SIGKILL while running a job; how long until
another supervisor, with default settings (lease 30 s), runs the job again?

Usage: python scripts/bench/rescue.py [--lease-ttl 30]
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

from shared.enqueue import enqueue


def attempt_running(conn: psycopg.Connection, job_id: int) -> int | None:
    row = conn.execute("SELECT attempt FROM supervisor.jobs WHERE id = %s AND state = "
                       "'running'", (job_id,)).fetchone()
    return row[0] if row else None


def measure(dsn: str, lease_ttl: float) -> float:
    """Seconds from the SIGKILL to the job running again elsewhere."""
    common.reset(dsn)
    job_id = enqueue("run_hold", {"seconds": 3600}, queue="rescue", dsn=dsn)
    cmd = common.supervisor_cmd("-n", "1", "-q", "rescue", "--lease-ttl", str(lease_ttl))
    env, cwd = common.supervisor_env(dsn), str(common.SCRIPTS)
    first = subprocess.Popen(cmd, env=env, cwd=cwd, stderr=subprocess.DEVNULL)
    second = None
    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            deadline = time.monotonic() + 30
            while attempt_running(conn, job_id) != 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            second = subprocess.Popen(cmd, env=env, cwd=cwd, stderr=subprocess.DEVNULL)
            time.sleep(2)  # the second supervisor is up and idle
            first.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            first.wait()
            deadline = killed + lease_ttl * 3 + 30
            while attempt_running(conn, job_id) != 2:
                if time.monotonic() > deadline:
                    raise SystemExit("the job was not rescued")
                time.sleep(0.05)
            return time.monotonic() - killed
        finally:
            for proc in (first, second):
                if proc is not None and proc.poll() is None:
                    proc.kill()
                    proc.wait()


def run(base_dsn: str = common.DEFAULT_DSN, lease_ttl: float = 30.0) -> list[tuple[str, str]]:
    """Rows for the report."""
    dsn = common.scratch_database(base_dsn, "supervisor_bench_rescue")
    try:
        seconds = measure(dsn, lease_ttl)
    finally:
        common.drop_database(base_dsn, "supervisor_bench_rescue")
    return [(f"SIGKILLed supervisor's job running again elsewhere, --lease-ttl {lease_ttl:g} "
             "(maintenance every 5 s, first retry backoff 0.5-1 s, poll 1 s)",
             f"{seconds:.1f} s")]


if __name__ == "__main__":
    common.cli(run, __doc__.splitlines()[0], lease_ttl=30.0)
