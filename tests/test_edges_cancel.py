"""Cancelling a running job: the supervisor kills its child and says so, without a
"will retry" verdict or a fencing warning, and the job stays cancelled."""

from __future__ import annotations

import signal

import pytest
from click.testing import CliRunner
from e2e import Supervisor, job_row, wait_until

from shared.enqueue import enqueue
from supervisor.cli.main import main

pytestmark = [pytest.mark.timeout(90), pytest.mark.slow]


def test_cancel_running_job_logs_cancelled_only(dsn, conn):
    job_id = enqueue("edges_sleep", {"seconds": 60}, conn=conn)
    sup = Supervisor(dsn, "-n", "1", app="edges_handlers")
    try:
        wait_until(lambda: job_row(dsn, job_id).get("state") == "running", what="running")
        result = CliRunner().invoke(main, ["jobs", "cancel", str(job_id), "--dsn", dsn])
        assert result.exit_code == 0, result.output
        sup.wait_for_log(f"job {job_id} edges_sleep attempt 1/20 failed (cancelled), cancelled")
        sup.signal(signal.SIGTERM)
        assert sup.wait() == 0
    finally:
        sup.stop()
    assert "will retry" not in sup.err
    assert "fenced off" not in sup.err, sup.err
    assert job_row(dsn, job_id)["state"] == "cancelled"
