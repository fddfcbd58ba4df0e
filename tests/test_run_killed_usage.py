"""Usage of attempts the parent ends itself (issue 26, "what each attempt cost"),
through a real ``supervisor run``: a job killed for its timeout, one killed over the
memory cap and one whose child crashed each record ``usage`` in their errors entry and
on the job, measured by the parent (``supervisor.pool.killedusage``)."""

from __future__ import annotations

import pytest
from e2e import Supervisor, job_row, run_burst

from shared.enqueue import enqueue

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]  # real supervisors: CI lane

KEYS = {"cpu_seconds", "wall_seconds", "max_rss_bytes"}


def burst(dsn: str, *args: str) -> Supervisor:
    return run_burst(dsn, "-n", "1", "--poll-interval", "0.1", *args, app="usage_handlers",
                     timeout=150)


def failed_usage(dsn: str, job_id: int, kind: str) -> dict:
    row = job_row(dsn, job_id)
    assert row["state"] == "discarded", row
    (error,) = row["errors"]
    assert error["kind"] == kind, error
    assert set(error["usage"]) == KEYS, error
    assert row["usage"] == error["usage"], (row["usage"], error)
    return error["usage"]


def test_a_spinning_job_killed_at_its_timeout_records_its_wall_and_cpu_time(dsn):
    job_id = enqueue("usage_spin_forever", {}, timeout=1.5, dsn=dsn)
    burst(dsn)
    usage = failed_usage(dsn, job_id, "timeout")
    # Killed at the deadline, read just before the signal: about the timeout (the
    # upper side only bounded by the parent's turn, generously).
    assert 1.5 <= usage["wall_seconds"] < 15, usage
    assert usage["cpu_seconds"] > 0, usage
    assert usage["cpu_seconds"] <= usage["wall_seconds"] + 0.1, usage
    assert usage["max_rss_bytes"] > 0, usage


def test_a_job_killed_over_the_memory_cap_records_a_peak_of_at_least_the_cap(dsn):
    job_id = enqueue("usage_grow", {"step_mb": 8, "max_mb": 1500}, dsn=dsn)
    burst(dsn, "--max-memory-per-child", "300MiB")
    usage = failed_usage(dsn, job_id, "memory")
    assert usage["max_rss_bytes"] >= 300 << 20, usage
    assert usage["wall_seconds"] > 0, usage


@pytest.mark.parametrize("how", ["segv", "exit"])
def test_a_crashed_job_records_usage_in_its_errors_entry(dsn, how):
    job_id = enqueue("usage_crash", {"seconds": 0.3, "how": how}, dsn=dsn)
    burst(dsn)
    usage = failed_usage(dsn, job_id, "crashed")
    # From the START the parent heard to the reap it saw: about the 0.3 s it ran, less
    # however late the parent heard the START (0.11 s once, in a full suite on 2 CPUs).
    assert usage["wall_seconds"] >= 0.1, usage
    # It spun 0.3 s of wall time: wait4 at its reaping says what CPU it got of it.
    assert usage["cpu_seconds"] > 0, usage
