"""Issue 47: no false alarms, and figures that mean what they say. A checkpoint left
unwritten by a job that completed rode the next lease renewal, which the completion
(written with a claim) had fenced off: "renew: 1 job(s) fenced off (lease moved on)" for
a job that ended normally. A lease really taken away still warns. A completed job's
progress is final (done = total), not its last report."""

from __future__ import annotations

import psycopg
import pytest
from e2e import Supervisor, job_row, run_burst, wait_until

from shared.enqueue import enqueue, enqueue_many

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def _config(tmp_path) -> str:
    path = tmp_path / "fast.toml"
    # Beats (and so progress) every 20 ms; renewals every lease_ttl / 3.
    path.write_text("[tool.supervisor]\nheartbeat_interval = 0.02\nheartbeat_timeout = 5\n")
    return str(path)


def test_a_thousand_completions_racing_renewals_raise_no_fencing_warning(dsn, tmp_path):
    enqueue_many("ot_checkpoint_and_end", [{"n": i} for i in range(1000)], dsn=dsn)
    sup = run_burst(dsn, "-n", "2", "--lease-ttl", "1", "--config", _config(tmp_path),
                    app="operator_truth_handlers", timeout=150, discards_ok=False)
    assert "stopped (1000 completed)" in sup.err, sup.err[-2000:]
    assert "fenced off" not in sup.err and "lease lost" not in sup.err, \
        [line for line in sup.err.splitlines() if "fenced" in line][:5]


def test_a_lease_really_taken_away_still_warns(dsn, tmp_path):
    gate = tmp_path / "gate"
    job_id = enqueue("ot_partial_progress", {"gate": str(gate)}, dsn=dsn)
    sup = Supervisor(dsn, "-n", "1", "--lease-ttl", "1", "--config", _config(tmp_path),
                     app="operator_truth_handlers")
    try:
        wait_until(lambda: job_row(dsn, job_id)["attempted_at"] is not None, timeout=60,
                   what="the job to start")
        with psycopg.connect(dsn, autocommit=True) as conn:  # another supervisor's now
            conn.execute("UPDATE supervisor.jobs SET lease_owner = 'thief:1:x' WHERE id = %s",
                         (job_id,))
        sup.wait_for_log("fenced off", timeout=30)
        sup.wait_for_log(f"job {job_id}: lease lost", timeout=30)
    finally:
        gate.touch()
        sup.stop()


def test_a_completed_jobs_progress_is_final(dsn, tmp_path):
    gate = tmp_path / "gate"
    job_id = enqueue("ot_partial_progress", {"gate": str(gate)}, dsn=dsn)
    sup = Supervisor(dsn, "-n", "1", "--lease-ttl", "1", "--config", _config(tmp_path),
                     app="operator_truth_handlers")
    try:
        wait_until(lambda: job_row(dsn, job_id)["progress"], timeout=60,
                   what="the partial progress to be stored")
        assert job_row(dsn, job_id)["progress"]["done"] == 0.05
        gate.touch()
        wait_until(lambda: job_row(dsn, job_id)["state"] == "completed", timeout=60,
                   what="the job to complete")
    finally:
        gate.touch()
        sup.stop()
    assert job_row(dsn, job_id)["progress"] == {"done": 5.0, "total": 5.0,
                                                "message": "started"}
