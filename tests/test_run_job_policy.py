"""A handler's settings apply to every job of its kind, however the job was enqueued:
by plain SQL, by `supervisor enqueue`, or by ``supervisor.enqueue()`` without options."""

from __future__ import annotations

import subprocess
import sys
from itertools import pairwise

import psycopg
import pytest
from e2e import TESTS_DIR, read_log, run_burst

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


def test_jobs_of_a_kind_get_its_handlers_max_attempts_whatever_enqueued_them(dsn, tmp_path):
    with psycopg.connect(dsn, autocommit=True) as conn:
        by_sql = conn.execute("INSERT INTO supervisor.jobs (kind, args) VALUES "
                              "('e2e_raise', '{}') RETURNING id").fetchone()[0]
    by_cli = int(subprocess.run(
        [sys.executable, "-m", "supervisor", "enqueue", "e2e_raise", "--dsn", dsn],
        capture_output=True, text=True, check=True, cwd=str(TESTS_DIR)).stdout)
    log = tmp_path / "run.log"
    run_burst(dsn, "-n", "1", log_path=log)
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = {row[0]: row[1:] for row in conn.execute(
            "SELECT id, state, attempt, max_attempts FROM supervisor.jobs")}
    assert rows[by_sql] == ("discarded", 2, 2)  # @job(max_attempts=2), not 20
    assert rows[by_cli] == ("discarded", 2, 2)
    assert sorted(r["id"] for r in read_log(log)) == sorted([by_sql] * 2 + [by_cli] * 2)


def test_the_handlers_backoff_sets_the_retry_delay(dsn, tmp_path):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO supervisor.jobs (kind, args) VALUES ('e2e_quick_backoff', '{}')")
    log = tmp_path / "run.log"
    run_burst(dsn, "-n", "1", log_path=log)
    times = sorted(r["t"] for r in read_log(log))
    assert len(times) == 3
    gaps = [b - a for a, b in pairwise(times)]
    # Backoff(base=0.2, factor=1, jitter=0): 0.2 s each; the default would wait 1-2 s
    # before the third attempt.
    assert all(0.15 < gap < 0.9 for gap in gaps), gaps
