"""Stop notices and checkpoints between the pool and real forked children (issue 28):
a notice raises Stopping in an opted-in handler, which then answers as the notice's kind
without its child being killed; one that ignores it is killed at the notice's deadline;
Stopping without a notice is an ordinary error; a soft timeout sets ``stopping``; a
flushed checkpoint waits for the parent's word."""

from __future__ import annotations

import checkpoint_handlers  # noqa: F401  (handlers are imported before forking)
import pytest
from pool_driver import drivers_made

from shared import jobs
from supervisor.pool import JobCheckpoint, JobDone, JobFailed, JobStarted

pytestmark = [pytest.mark.timeout(60), pytest.mark.slow]  # processes or waits: CI lane

_make_driver = pytest.fixture(name="make_driver")(drivers_made)


def started(d, job_id):
    return lambda: any(isinstance(o, JobStarted) and o.job.id == job_id for o in d.outcomes)


def test_a_notice_raises_stopping_and_the_answer_takes_the_notices_kind(make_driver):
    d = make_driver()
    job = d.job("ck_wait_told")
    assert d.pool.dispatch(job)
    d.until(started(d, job.id))
    assert d.pool.notify(job.id, "cancel", jobs.FAIL_CANCELLED, "cancelled", 30.0)
    assert not d.pool.notify(job.id, "cancel", jobs.FAIL_CANCELLED, "again", 30.0)
    d.until(lambda: d.finished(job.id) is not None)
    out = d.finished(job.id)
    assert isinstance(out, JobFailed) and out.kind == jobs.FAIL_CANCELLED, out
    assert "Stopping: stopping: cancel" in out.message
    assert d.events("killed") == []  # it answered: its child goes on
    assert isinstance(d.run("ck_soft"), JobDone)  # the same child takes the next job


def test_a_handler_that_ignores_its_notice_is_killed_at_the_deadline(make_driver):
    d = make_driver()
    job = d.job("ck_ignore")
    assert d.pool.dispatch(job)
    d.until(started(d, job.id))
    assert d.pool.notify(job.id, "cancel", jobs.FAIL_CANCELLED, "cancelled late", 0.5)
    d.until(lambda: d.finished(job.id) is not None)
    out = d.finished(job.id)
    assert isinstance(out, JobFailed) and out.kind == jobs.FAIL_CANCELLED, out
    assert len(d.events("killed")) == 1


def test_stopping_raised_without_a_notice_is_an_ordinary_error(make_driver):
    out = make_driver().run("ck_raise_unasked")
    assert isinstance(out, JobFailed) and out.kind == jobs.FAIL_ERROR, out


def test_a_soft_timeout_sets_stopping(make_driver):
    out = make_driver().run("ck_soft")
    assert isinstance(out, JobDone) and out.result_json == '"soft_timeout"', out


def test_a_flushed_checkpoint_waits_for_the_parents_word(make_driver):
    d = make_driver()
    job = d.job("ck_flush_once")
    assert d.pool.dispatch(job)
    d.until(lambda: any(isinstance(o, JobCheckpoint) for o in d.outcomes))
    said = next(o for o in d.outcomes if isinstance(o, JobCheckpoint))
    assert said.flush and said.state_json == '{"at":"the end"}'
    for _ in range(10):  # not answered: it waits
        d.turn(0.02)
    assert d.finished(job.id) is None
    d.pool.checkpoint_written(job.id, True)
    d.until(lambda: d.finished(job.id) is not None)
    assert isinstance(d.finished(job.id), JobDone)


def test_a_notice_during_flushed_checkpoints_comes_out_in_the_handler(make_driver):
    d = make_driver()
    job = d.job("ck_flush_loop")
    assert d.pool.dispatch(job)
    answered = 0

    def answer_flushes():
        nonlocal answered
        points = [o for o in d.outcomes if isinstance(o, JobCheckpoint)]
        for said in points[answered:]:
            d.pool.checkpoint_written(said.job.id, True)
        answered = len(points)
        return answered >= 50

    d.until(answer_flushes)
    assert d.pool.notify(job.id, "drain", jobs.FAIL_STOPPED, "stopped for a drain", None)
    d.until(lambda: (answer_flushes(), d.finished(job.id))[1] is not None)
    out = d.finished(job.id)
    assert isinstance(out, JobFailed) and out.kind == jobs.FAIL_STOPPED, out
    assert "checkpoint_handlers.py" in out.traceback  # raised in the handler's frame
    assert d.events("killed") == []  # no torn frame, no broken pipe
    assert isinstance(d.run("ck_soft"), JobDone)
