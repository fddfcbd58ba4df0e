"""Memory of a child's whole process tree (issue 45) through real ``supervisor run``
processes: a job whose subprocess (an ffmpeg's stand-in) holds the memory is measured,
admitted and capped by the tree's RSS, not by the handler's own."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from e2e import Supervisor, job_row, wait_until

from shared.enqueue import enqueue
from shared.exitcodes import CLI_JOBS_FAILED

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]  # real supervisors

MIB = 1 << 20


def test_jobs_whose_subprocess_holds_600_mib_never_run_side_by_side(dsn):
    ids = [enqueue("mem_tree", {"megabytes": 600, "seconds": 1.5}, dsn=dsn)
           for _ in range(4)]
    sup = Supervisor(dsn, "--burst", "-n", "4", "--poll-interval", "0.1",
                     "--memory-budget", "1GiB", app="memory_handlers")
    try:
        assert sup.wait(240) == 0, sup.err[-3000:]
    finally:
        sup.stop()
    with psycopg.connect(dsn, autocommit=True) as conn:
        overlaps = conn.execute(
            "SELECT count(*) FROM supervisor.jobs a JOIN supervisor.jobs b ON a.id < b.id "
            "WHERE a.id = ANY(%s) AND b.id = ANY(%s) "
            "AND a.attempted_at < b.finished_at AND b.attempted_at < a.finished_at",
            (ids, ids)).fetchone()[0]
    assert overlaps == 0
    for job_id in ids:
        row = job_row(dsn, job_id)
        assert row["state"] == "completed", row
        # The handler itself holds a few MiB: the tree's peak is what was recorded.
        assert row["usage"]["max_rss_bytes"] >= 600 * MIB, row["usage"]


def test_the_memory_cap_kills_a_job_whose_subprocess_grows_past_it(dsn):
    job_id = enqueue("mem_tree", {"megabytes": 600, "seconds": 3}, max_attempts=1,
                     dsn=dsn)
    sup = Supervisor(dsn, "--burst", "-n", "1", "--poll-interval", "0.1",
                     "--max-memory-per-child", "300MiB", app="memory_handlers")
    try:
        assert sup.wait(120) == CLI_JOBS_FAILED, sup.err[-3000:]
    finally:
        sup.stop()
    row = job_row(dsn, job_id)
    assert row["state"] == "discarded", row
    (error,) = row["errors"]
    assert error["kind"] == "memory" and "max_memory_per_child" in error["message"], error
    assert error["usage"]["max_rss_bytes"] > 300 * MIB, error
    assert f"job {job_id} mem_tree" in sup.err  # the log line names the job


def test_children_are_the_oom_killers_first_pick_not_the_parent(dsn):
    sup = Supervisor(dsn, "-n", "2", "--poll-interval", "0.1", app="memory_handlers")
    try:
        sup.wait_for_log("starting 2 children", timeout=60)
        kids = wait_until(lambda: sup.children() if len(sup.children()) == 2 else None,
                          timeout=30, what="two children")
        parent = int(Path(f"/proc/{sup.pid}/oom_score_adj").read_text())
        for pid in kids:
            adj = Path(f"/proc/{pid}/oom_score_adj")
            wait_until(lambda adj=adj: int(adj.read_text()) >= 500, timeout=30,
                       what="the child's raised oom_score_adj")
            assert int(adj.read_text()) == max(500, parent)  # raised, never lowered
    finally:
        sup.stop()
