"""``--log-format json`` through a real supervisor: every line on stderr is a JSON object,
and a job's failure carries its id, kind, queue and attempt as keys."""

from __future__ import annotations

import json

import psycopg
import pytest
from e2e import run_burst
from e2e_handlers import e2e_raise

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]


def test_json_log_lines_parse_and_name_the_job(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:  # the handler's max_attempts=2
        job_id = e2e_raise.options(conn=conn).enqueue(message="boom\nsecond line")
    sup = run_burst(dsn, "-n", "1", "--log-format", "json")
    entries = [json.loads(line) for line in sup.err.splitlines() if line.strip()]
    failures = [e for e in entries if e.get("job_id") == job_id]
    assert [e["attempt"] for e in failures] == [1, 2]
    assert {(e["kind"], e["queue"], e["failure"]) for e in failures} == {
        ("e2e_raise", "default", "error")}
    assert [e["verdict"] for e in failures] == ["will retry", "discarded"]
    assert all(e["level"] == "warning" and e["logger"] == "supervisor.jobs" for e in failures)


def test_an_error_at_start_up_is_json_too(tmp_path):
    import subprocess
    import sys

    from e2e import TESTS_DIR

    done = subprocess.run(
        [sys.executable, "-m", "supervisor", "run", "--app", "e2e_handlers", "--log-format",
         "json", "--dsn", "host=127.0.0.1 port=1 dbname=x connect_timeout=1"],
        capture_output=True, text=True, timeout=60, cwd=str(TESTS_DIR))
    assert done.returncode == 1
    entries = [json.loads(line) for line in done.stderr.splitlines() if line.strip()]
    assert entries and entries[-1]["level"] == "error"
    assert "cannot connect to PostgreSQL" in entries[-1]["message"]
