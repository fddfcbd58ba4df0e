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
