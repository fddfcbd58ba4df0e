"""``workers.Snooze`` written by the parent (issue 11): the job is scheduled again after
the delay with its attempt unspent and no errors entry; the write is fenced like every
other; end to end, a job that snoozes on its only allowed attempt still completes."""

from __future__ import annotations

import json

import psycopg
import pytest
from e2e import job_row, run_burst

from shared.enqueue import enqueue
from supervisor.db import Snooze, Store

pytestmark = pytest.mark.timeout(60)


def _row(conn, job_id):
    return conn.execute(
        "SELECT state, attempt, errors, lease_owner, extract(epoch FROM run_at - now())"
        " FROM supervisor.jobs WHERE id = %s", (job_id,)).fetchone()


def test_store_snooze_schedules_later_without_spending_the_attempt(conn):
    job_id = enqueue("k", max_attempts=1, conn=conn)
    store = Store(conn, "me")
    [job] = store.claim("default", ["k"], 1)
    assert store.snooze([Snooze(job_id, job.attempt, 90.0)]) == []
    state, attempt, errors, owner, due_in = _row(conn, job_id)
    assert (state, attempt, errors, owner) == ("scheduled", 0, [], None)
    assert 80 < due_in <= 90
    assert store.claim("default", ["k"], 1) == []  # not before its time


def test_store_snooze_is_fenced_by_the_lease(conn):
    job_id = enqueue("k", conn=conn)
    [job] = Store(conn, "me").claim("default", ["k"], 1)
    other = Store(conn, "someone-else")
    fenced = other.snooze([Snooze(job_id, job.attempt, 5.0)])
    assert fenced == [job_id]
    assert _row(conn, job_id)[:2] == ("running", 1)


@pytest.mark.slow
def test_a_snoozed_job_runs_again_and_completes_on_its_only_attempt(dsn, tmp_path):
    marker = str(tmp_path / "snoozed-once")
    with psycopg.connect(dsn, autocommit=True) as conn:
        job_id = enqueue("cf_snooze", {"delay": 0.5, "marker": marker}, max_attempts=1,
                         conn=conn)
    sup = run_burst(dsn, "-n", "1", "--log-format", "json",
                    "--app", "childfaults_handlers")
    row = job_row(dsn, job_id)
    assert row["state"] == "completed", (row, sup.err)
    # Attempt 1 snoozed and gave its attempt back, so the run that completed is attempt 1.
    assert row["attempt"] == 1 and row["errors"] == [] and row["result"] == {"attempt": 1}
    entries = [json.loads(line) for line in sup.err.splitlines() if line.strip()]
    snoozed = [e for e in entries if e.get("job_id") == job_id and e.get("verdict")]
    assert [e["verdict"] for e in snoozed] == ["snoozed"]
