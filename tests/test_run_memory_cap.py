"""The memory cap through a real ``supervisor run``: a job growing past
``--max-memory-per-child`` is killed while it runs and its row says ``memory``."""

import pytest
from e2e import Supervisor, job_row

from shared.enqueue import enqueue
from shared.exitcodes import CLI_JOBS_FAILED

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]  # a real supervisor


def test_a_job_past_the_memory_cap_fails_as_memory_and_is_discarded_at_its_last_attempt(
        dsn, tmp_path):
    report = tmp_path / "got"
    job_id = enqueue("pf_grow", {"step_mb": 8, "max_mb": 1500, "report": str(report)},
                     max_attempts=1, dsn=dsn)
    sup = Supervisor(dsn, "--burst", "-n", "1", "--poll-interval", "0.1",
                     "--max-memory-per-child", "300MiB", app="podfaults_handlers")
    assert sup.wait(90) == CLI_JOBS_FAILED, sup.err  # a burst that discarded a job
    row = job_row(dsn, job_id)
    assert row["state"] == "discarded", row
    (error,) = row["errors"]
    assert error["kind"] == "memory" and "max_memory_per_child" in error["message"]
    assert int(report.read_text()) < 1000  # stopped on its way, not at 1500 MB
