"""Issue 47: one log line per failed attempt, said after its verdict. A crash that may
repeat the job's last one (poison) waits for its write; the write says retry or poison,
and the line, the run's counts and the metrics follow what it said, once each."""

from __future__ import annotations

import logging

from shared.jobs import FAIL_CRASHED, FAIL_ERROR, ClaimedJob
from supervisor.db import Failure, FailuresWritten
from supervisor.engine.ledger import Ledger
from supervisor.engine.outbox import Outbox
from supervisor.engine.reporting import OutcomeReporter
from supervisor.observe.metrics import SupervisorMetrics
from supervisor.pool import JobFailed


def _job(job_id: int, attempt: int, max_attempts: int = 3) -> ClaimedJob:
    return ClaimedJob(job_id, "chunk", "video", attempt, max_attempts, 0, 8.0, "{}")


def _reporter() -> tuple[OutcomeReporter, SupervisorMetrics]:
    metrics = SupervisorMetrics("o", version="1")
    return OutcomeReporter(Ledger(), Outbox(metrics, 0.02), metrics), metrics


def _failed(job: ClaimedJob, kind: str = FAIL_CRASHED) -> JobFailed:
    return JobFailed(job, kind, "child 4711 killed by SIGSEGV", None, None, False, 8.0)


def _written(job: ClaimedJob, kind: str = FAIL_CRASHED) -> Failure:
    return Failure(job.id, job.attempt, kind, "child 4711 killed by SIGSEGV", job_kind="chunk")


def _lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "supervisor.jobs"]


def _metric(metrics: SupervisorMetrics, name: str, labels: str = "") -> str | None:
    for line in metrics.render().decode().splitlines():
        if line.startswith(f'{name}{{queue="video",kind="chunk"{labels}}}'):
            return line.rsplit(" ", 1)[1]
    return None


def test_a_crash_the_write_finds_poison_is_one_line_discarded_as_poison(caplog):
    caplog.set_level(logging.INFO, logger="supervisor")
    reporter, metrics = _reporter()
    job = _job(41, 2)
    reporter.record([_failed(job)], 0.0)
    assert _lines(caplog) == []  # nothing said before the write decides
    reporter.settle_failures(FailuresWritten([_written(job)], frozenset({41}), frozenset({41})))
    assert _lines(caplog) == [
        "job 41 chunk attempt 2/3 failed (crashed), discarded as poison (the same crash as "
        "its last attempt): child 4711 killed by SIGSEGV"]
    assert reporter.ledger.finished["discarded"] == 1
    assert reporter.discard_reasons == {"poison": 1}
    assert _metric(metrics, "supervisor_jobs_discarded_total", ',reason="poison"') == "1"
    assert _metric(metrics, "supervisor_jobs_retried_total") is None


def test_a_crash_the_write_retries_is_one_line_will_retry(caplog):
    caplog.set_level(logging.INFO, logger="supervisor")
    reporter, metrics = _reporter()
    job = _job(42, 1)
    reporter.record([_failed(job)], 0.0)
    reporter.settle_failures(FailuresWritten([_written(job)], frozenset({42}), frozenset()))
    assert _lines(caplog) == [
        "job 42 chunk attempt 1/3 failed (crashed), will retry: child 4711 killed by SIGSEGV"]
    assert reporter.ledger.finished["discarded"] == 0
    assert _metric(metrics, "supervisor_jobs_retried_total") == "1"


def test_failures_that_are_no_crash_or_final_are_said_at_once_and_only_once(caplog):
    caplog.set_level(logging.INFO, logger="supervisor")
    reporter, metrics = _reporter()
    error, last = _job(43, 1), _job(44, 3)
    reporter.record([_failed(error, FAIL_ERROR), _failed(last)], 0.0)
    assert [line.split(":")[0] for line in _lines(caplog)] == [
        "job 43 chunk attempt 1/3 failed (error), will retry",
        "job 44 chunk attempt 3/3 failed (crashed), discarded"]
    # The write marks 44 poison too (the same crash as before): no second line.
    reporter.settle_failures(FailuresWritten([_written(error, FAIL_ERROR), _written(last)],
                                             frozenset({43, 44}), frozenset({44})))
    assert len(_lines(caplog)) == 2
    assert reporter.discard_reasons == {"poison": 1}
    # Its metrics waited for the write: discarded as poison, never as crashed.
    assert _metric(metrics, "supervisor_jobs_discarded_total", ',reason="poison"') == "1"
    assert _metric(metrics, "supervisor_jobs_discarded_total", ',reason="crashed"') is None


def test_a_fenced_crash_gets_no_verdict_of_ours(caplog):
    caplog.set_level(logging.INFO, logger="supervisor")
    reporter, _ = _reporter()
    job = _job(45, 1)
    reporter.record([_failed(job)], 0.0)
    reporter.settle_failures(FailuresWritten([_written(job)], frozenset(), frozenset()))
    assert _lines(caplog) == []
    reporter.settle_failures(FailuresWritten([_written(job)], frozenset({45}), frozenset()))
    assert _lines(caplog) == []  # forgotten, not said late
