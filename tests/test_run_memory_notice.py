"""The memory cap's stop notice through a real supervisor (issue 28): a running job
whose child passes ``--max-memory-per-child`` is told (``Stopping``, reason
``memory``) before any kill, hands itself back after its checkpoint, fails as
``memory`` (the attempt counts: a job that always outgrows the cap must not loop
uncharged), and its retry on a fresh child resumes from the checkpoint."""

import pytest
from e2e import Supervisor, job_row, read_log

from shared.enqueue import enqueue

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]  # a real supervisor


def test_a_job_over_the_memory_cap_is_told_hands_itself_back_and_resumes(dsn, tmp_path):
    log = tmp_path / "runs.log"
    config = tmp_path / "supervisor.toml"
    config.write_text("kill_grace = 10\n")
    job_id = enqueue("ck_memory", {"target_mb": 215}, max_attempts=3, dsn=dsn)
    sup = Supervisor(dsn, "--burst", "-n", "1", "--poll-interval", "0.1",
                     "--max-memory-per-child", "200MiB", "--config", str(config),
                     log_path=log, app="checkpoint_handlers")
    assert sup.wait(90) == 0, sup.err
    records = [r for r in read_log(log) if r["id"] == job_id]
    # "grown" is missing when the parent's RSS sample lands while the job is still
    # growing past the cap (4 MB at a time): it is told then, before its record.
    records = [r for r in records if r["event"] != "grown"]
    events = [r["event"] for r in records]
    assert events == ["start", "stopping", "start"], (events, sup.err[-2000:])
    assert records[1]["reason"] == "memory"
    first, second = records[0], records[2]
    assert first["rss"] < 200  # the child started under the cap
    assert second["resumed"] == {"grown": True} and second["pid"] != first["pid"]
    row = job_row(dsn, job_id)
    assert (row["state"], row["attempt"], row["result"]) == ("completed", 2, "resumed")
    (error,) = row["errors"]
    assert error["kind"] == "memory"
    assert "max_memory_per_child" in error["message"]
    assert "it stopped itself first" in error["message"]
