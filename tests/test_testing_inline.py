"""``supervisor.testing.run_inline``: one handler run as a job runs, no database."""

from __future__ import annotations

import pytest
import testing_handlers as h

from supervisor.testing import JobBindingError, JobResultError, run_inline
from workers import Discard, Retry, Snooze, current_job, job


@job(queue="inline_q", max_attempts=4)
def ti_context(x: int) -> dict:
    ctx = current_job()
    ctx.progress(1, 2)
    return {"kind": ctx.kind, "queue": ctx.queue, "attempt": ctx.attempt,
            "max_attempts": ctx.max_attempts, "args": ctx.args, "fake_id": ctx.id < 0,
            "pair": (x, x)}


def test_returns_the_result_as_stored_with_a_fake_current_job():
    assert run_inline(h.th_add, a=2, b=3) == 5
    assert run_inline(ti_context, x=7) == {
        "kind": "ti_context", "queue": "inline_q", "attempt": 1, "max_attempts": 4,
        "args": {"x": 7}, "fake_id": True, "pair": [7, 7]}  # JSON: the tuple is a list
    with pytest.raises(RuntimeError, match="outside a running job"):
        current_job()  # cleared afterwards


def test_args_that_do_not_bind_raise_what_a_child_records(conn):
    with pytest.raises(JobBindingError) as caught:
        run_inline(h.th_add, a=1)
    inline_message = str(caught.value)
    assert inline_message == ("args do not fit th_add(a: 'int', b: 'int') -> 'int': "
                              "missing a required argument: 'b'")
    assert isinstance(caught.value, TypeError)
    with pytest.raises(JobBindingError, match="got an unexpected keyword argument 'c'"):
        run_inline(h.th_add, a=1, b=2, c=3)
    # the same words a drained (child-run) job records when it is discarded
    from shared.enqueue import enqueue
    from supervisor.testing import drain

    with pytest.raises(TypeError) as at_enqueue:  # the handle checks at once now
        h.th_add.options(conn=conn).enqueue(a=1)
    assert str(at_enqueue.value) == inline_message
    job_id = enqueue("th_add", {"a": 1}, conn=conn)  # by kind: no handler to check with
    drain(conn=conn)
    error = conn.execute("SELECT errors -> -1 FROM supervisor.jobs WHERE id = %s",
                         (job_id,)).fetchone()[0]
    assert (error["kind"], error["message"]) == ("binding", inline_message)


def test_the_handlers_own_exceptions_come_out_as_raised():
    with pytest.raises(Discard, match="why not"):
        run_inline(h.th_discards, why="why not")
    with pytest.raises(Retry) as retry:
        run_inline(h.th_retry_later)
    assert retry.value.delay == 3600
    h.SNOOZED.clear()
    with pytest.raises(Snooze):
        run_inline(h.th_snooze_once, key="inline")
    with pytest.raises(ValueError, match="broken k at attempt 1"):
        run_inline(h.th_always_fails, key="k")


def test_results_that_cannot_be_stored_and_args_that_are_not_json():
    with pytest.raises(JobResultError, match="is not a finite number"):
        run_inline(h.th_nan)
    with pytest.raises(TypeError, match="are not JSON"):
        run_inline(h.th_add, a=object(), b=1)
    with pytest.raises(TypeError, match="takes a @job handler"):
        run_inline(lambda: None)
