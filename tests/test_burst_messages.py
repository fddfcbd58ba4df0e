"""What a burst run says: jobs of kinds this supervisor does not serve are counted and named as
it ends (not "no more work" alone); the summary counts failed attempts and discarded
jobs apart; the progress line gives no ETA for jobs waiting for their run_at but says
when the next is due; a completed job always says when it was attempted."""

from __future__ import annotations

import pytest
from e2e import run_burst

from shared.enqueue import enqueue, enqueue_many
from supervisor.observe.progress import BurstProgress, Failures, Waits
from supervisor.observe.progress import summary as run_summary

pytestmark = pytest.mark.timeout(90)


def test_progress_while_waiting_for_a_delayed_job_says_until_when():
    meter = BurstProgress(now=0.0, interactive=False)
    finished = {"completed": 10, "failed": 30, "discarded": 10}
    counts = {"q": {"scheduled": 1, "available": 0, "running": 0}}
    failures = Failures({"error": 8, "poison": 2})
    assert meter.render(10.0, finished, counts, Waits(1, 0, 23.0), failures) == (
        "10 done, 30 failed attempts, 10 jobs discarded [8 error, 2 poison], 4.0/s, "
        "0 left, 1 waiting for their run_at, the next due in 23s")
    assert meter.render(10.0, finished, counts) == (
        "10 done, 30 failed attempts, 10 jobs discarded, 4.0/s, 0 left, "
        "1 waiting for their run_at")
    counts = {"q": {"available": 8, "running": 2, "retryable": 3}}
    assert meter.render(10.0, finished, counts, Waits(3, 0, 2.0),
                        Failures({"error": 10}, cancelled=1)) == (
        "10 done, 30 failed attempts, 10 jobs discarded [10 error], 1 job cancelled "
        "[a dependency failed], 4.0/s, 10 left, ETA 3s, "
        "3 waiting for their run_at, the next due in 2s")


def test_progress_names_dependency_waits_as_such():
    meter = BurstProgress(now=0.0, interactive=False)
    finished = {"completed": 12}
    counts = {"q": {"scheduled": 1, "available": 0, "running": 0}}
    line = meter.render(10.0, finished, counts, Waits(timed=0, held=1), Failures())
    assert line == "12 done, 0 failed attempts, 1.2/s, 0 left, 1 waiting for their dependencies"
    assert "run_at" not in line and "due in" not in line


def test_the_closing_summary_counts_every_outcome_by_reason():
    finished = {"completed": 3, "failed": 2, "discarded": 1, "interrupted": 1}
    assert run_summary(finished, Failures({"poison": 1}, cancelled=1), rescued=2) == (
        "3 completed, 1 job discarded [1 poison], 1 job cancelled [a dependency failed], "
        "2 failed attempts, 1 interrupted (went back), 2 rescued from dead supervisors")
    assert run_summary({}, Failures()) == "idle"


@pytest.mark.slow
def test_burst_names_unhandled_kinds_and_counts_discarded_apart(dsn):
    enqueue_many("e2e_noop", [{}, {}], dsn=dsn)
    enqueue_many("e2e_raise", [{}, {}], dsn=dsn)  # 2 attempts each, then discarded
    enqueue("e2e_discard", dsn=dsn)
    enqueue_many("nu_unknown_a", [{}, {}, {}], dsn=dsn)
    enqueue("nu_unknown_b", dsn=dsn)
    sup = run_burst(dsn, "-n", "2", "-q", "default")
    assert ("burst: 4 jobs in default wait for kinds this supervisor does not serve: "
            "nu_unknown_a (3), nu_unknown_b (1); they stay queued for a supervisor whose "
            "--app defines them and that can hold what they declare") in sup.err
    assert ("(2 completed, 3 jobs discarded [2 error, 1 discard], 5 failed attempts)"
            in sup.err), sup.err


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
