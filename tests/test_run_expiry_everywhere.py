"""Expiry with batches, dependencies and keyed queues under a real supervisor (issue
28, schema 0021): jobs past their expires_at never run, whichever claim passes over
them; the batch they belonged to closes and its callback runs; a job depending on one
is cancelled naming it; the jobs beside them run."""

from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from click.testing import CliRunner
from e2e import Supervisor, job_row, read_log, wait_until

from shared.batches import Callback
from shared.enqueue import enqueue, enqueue_many
from supervisor.cli import main

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def test_expired_batch_members_dependencies_and_keyed_jobs_never_run(dsn, tmp_path):
    result = CliRunner().invoke(main, ["queues", "limit", "keyed", "--per-key-max-running",
                                       "1", "--dsn", dsn])
    assert result.exit_code == 0, result.output
    soon = datetime.now(UTC) + timedelta(seconds=0.5)
    batch = enqueue_many("e2e_noop", [{"n": 1}, {"n": 2}], expires_at=soon,
                         then=Callback("e2e_noop", {"n": 99}), dsn=dsn)
    dep = enqueue("e2e_noop", {"n": 3}, expires_at=soon, dsn=dsn)
    after = enqueue("e2e_noop", {"n": 4}, depends_on=[dep], dsn=dsn)
    keyed_doomed = enqueue("e2e_noop", {"n": 5}, queue="keyed", concurrency_key="a",
                           expires_at=soon, dsn=dsn)
    keyed_live = enqueue("e2e_noop", {"n": 6}, queue="keyed", concurrency_key="b", dsn=dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        wait_until(lambda: conn.execute("SELECT now() > %s + interval '0.1 s'",
                                        (soon,)).fetchone()[0], what="the expiry")
    log = tmp_path / "run.log"
    config = tmp_path / "supervisor.toml"
    config.write_text("maintenance_interval = 0.5\npoll_interval = 0.2\n")
    sup = Supervisor(dsn, "-n", "2", "-q", "default", "-q", "keyed", "--config", str(config),
                     log_path=log)
    try:
        summary = batch.wait(timeout=60)
        assert summary.expired == 2 and summary.callback_id is not None
        wait_until(lambda: job_row(dsn, summary.callback_id)["state"] == "completed",
                   timeout=30, what="the batch's callback run")
        wait_until(lambda: job_row(dsn, keyed_live)["state"] == "completed", timeout=30,
                   what="the live keyed job")
        wait_until(lambda: job_row(dsn, keyed_doomed)["state"] == "expired", timeout=30,
                   what="the expired keyed job swept")
    finally:
        sup.stop()
    ran = sorted(r["id"] for r in read_log(log))
    assert ran == sorted([summary.callback_id, keyed_live]), sup.err[-2000:]
    assert [job_row(dsn, i)["state"] for i in (*batch.ids, dep)] == ["expired"] * 3
    row = job_row(dsn, after)
    assert row["state"] == "cancelled"
    assert row["errors"][-1]["message"] == f"dependency {dep} ended expired"
