"""What a burst run says: jobs of kinds no loaded handler runs are counted and named as
it ends (not "no more work" alone); the summary counts failed attempts and discarded
jobs apart; the progress line gives no ETA for jobs waiting for their run_at but says
when the next is due; a completed job always says when it was attempted."""

from __future__ import annotations

import pytest
from e2e import run_burst

from shared.enqueue import enqueue, enqueue_many
from supervisor.observe.progress import BurstProgress

pytestmark = pytest.mark.timeout(90)


def test_progress_while_waiting_for_a_delayed_job_says_until_when():
    meter = BurstProgress(now=0.0, interactive=False)
    finished = {"completed": 10, "failed": 30, "discarded": 10}
    counts = {"q": {"scheduled": 1, "available": 0, "running": 0}}
    assert meter.render(10.0, finished, counts, next_due=33.0) == (
        "10 done, 30 failed attempts (10 discarded), 4.0/s, 0 left, "
        "1 waiting for their run_at, the next due in 23s")
    assert meter.render(10.0, finished, counts) == (
        "10 done, 30 failed attempts (10 discarded), 4.0/s, 0 left, "
        "1 waiting for their run_at")
    counts = {"q": {"available": 8, "running": 2, "retryable": 3}}
    assert meter.render(10.0, finished, counts, next_due=12.0) == (
        "10 done, 30 failed attempts (10 discarded), 4.0/s, 10 left, ETA 3s, "
        "3 waiting for their run_at, the next due in 2s")


@pytest.mark.slow
def test_burst_names_unhandled_kinds_and_counts_discarded_apart(dsn):
    enqueue_many("e2e_noop", [{}, {}], dsn=dsn)
    enqueue_many("e2e_raise", [{}, {}], dsn=dsn)  # 2 attempts each, then discarded
    enqueue("e2e_discard", dsn=dsn)
    enqueue_many("nu_unknown_a", [{}, {}, {}], dsn=dsn)
    enqueue("nu_unknown_b", dsn=dsn)
    sup = run_burst(dsn, "-n", "2", "-q", "default")
    assert ("burst: 4 jobs in default wait for kinds no loaded handler runs: "
            "nu_unknown_a (3), nu_unknown_b (1); they stay queued for a supervisor whose "
            "--app defines them") in sup.err
    assert "(2 completed, 3 jobs discarded, 5 failed attempts)" in sup.err


@pytest.mark.slow
def test_short_jobs_completed_say_when_they_were_attempted(dsn):
    import psycopg

    enqueue_many("e2e_noop", [{}] * 40, dsn=dsn)
    run_burst(dsn, "-n", "2", "-q", "default")
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT count(*), count(attempted_at), "
                            "count(*) FILTER (WHERE attempted_at > finished_at) "
                            "FROM supervisor.jobs WHERE state = 'completed'").fetchone()
    assert rows == (40, 40, 0)
