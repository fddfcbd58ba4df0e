"""``supervisor.testing.drain`` and ``enqueued`` against real PostgreSQL: jobs run in the
test process (or a forked child each) with no ``supervisor run``, and end in the states
a supervisor leaves them in."""

from __future__ import annotations

import os

import psycopg
import pytest
import testing_handlers as h

import supervisor
from shared.db import SchemaMissing
from supervisor.testing import DrainSummary, KindCounts, drain, enqueued


@pytest.fixture
def env_dsn(dsn, monkeypatch):
    """Producers without conn= and drain without conn= use this test's database."""
    monkeypatch.setenv("SUPERVISOR_DSN", dsn)
    return dsn


def row(conn, job_id):
    return conn.execute(
        "SELECT state, attempt, result, errors, run_at > now() + interval '1 minute', progress"
        " FROM supervisor.jobs WHERE id = %s", (job_id,)).fetchone()


def test_enqueued_filters_by_kind_queue_and_args_containment(conn):
    a = h.th_add.options(conn=conn).enqueue(a=1, b=2)
    b = h.th_add.options(conn=conn, queue="other").enqueue(a=1, b=3)
    c = h.th_step.options(conn=conn).enqueue(name="x")
    assert [j.id for j in enqueued(conn=conn)] == [a, b, c]
    assert [j.id for j in enqueued(h.th_add, conn=conn)] == [a, b]
    assert [j.id for j in enqueued("th_add", queue="other", conn=conn)] == [b]
    assert [j.id for j in enqueued(args={"a": 1}, conn=conn)] == [a, b]
    assert [j.id for j in enqueued(args={"a": 1, "b": 3}, conn=conn)] == [b]
    assert enqueued(args={"a": 2}, conn=conn) == []
    first = enqueued(kind="th_add", args={"b": 2}, conn=conn)[0]
    assert (first.kind, first.queue, first.args, first.state) == ("th_add", "th", {"a": 1, "b": 2},
                                                                   "available")
    with pytest.raises(AttributeError):
        first.state = "x"  # frozen records


def test_enqueued_sees_the_callers_uncommitted_jobs_only_on_its_connection(dsn):
    with psycopg.connect(dsn) as mine, mine.transaction():
        h.th_add.options(conn=mine).enqueue(a=5, b=5)
        assert len(enqueued(h.th_add, conn=mine)) == 1
        assert enqueued(h.th_add, dsn=dsn) == []  # not committed yet


def test_drain_runs_jobs_in_this_process_and_stores_results(conn):
    ids = [h.th_add.options(conn=conn).enqueue(a=i, b=1) for i in range(3)]
    pid = h.th_pid.options(conn=conn).enqueue()
    summary = drain(conn=conn)
    assert isinstance(summary, DrainSummary)
    assert (summary.completed, summary.failed, summary.discarded) == (4, 0, 0)
    assert summary.by_kind == {"th_add": KindCounts(completed=3), "th_pid": KindCounts(completed=1)}
    assert [row(conn, i)[:3] for i in ids] == [("completed", 1, i + 1) for i in range(3)]
    seen = row(conn, pid)[2]
    assert seen == {"pid": os.getpid(), "id": pid, "attempt": 1, "queue": "th"}
    assert enqueued(conn=conn) == []
    assert drain(conn=conn).ran == 0  # nothing left


def test_drain_completes_a_batch_and_runs_its_callback(env_dsn, conn):
    batch = h.th_tile.enqueue_many([{"x": x} for x in range(4)],
                                   then=h.th_collect.bind(label="done"))
    summary = drain()
    assert summary.by_kind["th_tile"].completed == 4
    assert summary.by_kind["th_collect"].completed == 1
    # the callback ran after every member, and read the members from the database
    assert [a.kind for a in summary.attempts][-1] == "th_collect"
    state = batch.summary()
    assert (state.completed, state.finished) == (4, True)
    assert supervisor.wait(state.callback_id, timeout=5) == {
        "label": "done", "batch": batch.id, "squares": [0, 1, 4, 9], "states": ["completed"]}


def test_drain_follows_depends_on(env_dsn, conn):
    a = h.th_step.enqueue(name="a")
    b = h.th_step.enqueue(name="b")
    later = h.th_step.options(depends_on=[a, b]).enqueue(name="later")
    assert enqueued(args={"name": "later"})[0].state == "scheduled"
    summary = drain(queues=["th_steps"])
    assert [x.result for x in summary.attempts] == ["a", "b", "later"]
    assert row(conn, later)[0] == "completed"


def test_drain_cancels_a_dependent_of_a_discarded_job(env_dsn, conn):
    bad = h.th_discards.enqueue(why="no input")
    later = h.th_step.options(depends_on=[bad]).enqueue(name="never")
    summary = drain()
    assert summary.discarded == 1 and summary.completed == 0
    state, _, _, errors, _, _ = row(conn, later)
    assert state == "cancelled"
    assert f"dependency {bad} ended discarded" in errors[-1]["message"]


def test_drain_retries_a_failing_job_up_to_its_max_attempts(conn):
    job_id = h.th_always_fails.options(conn=conn).enqueue(key="k")
    summary = drain(conn=conn)
    assert [(a.attempt, a.outcome) for a in summary.attempts] == [
        (1, "failed"), (2, "failed"), (3, "discarded")]
    assert summary.attempts[0].error == "error: ValueError: broken k at attempt 1"
    state, attempt, _, errors, _, _ = row(conn, job_id)
    assert (state, attempt) == ("discarded", 3)
    assert [e["attempt"] for e in errors] == [1, 2, 3]
    assert "Traceback" in errors[0]["traceback"]


def test_drain_retry_then_success_and_the_rows_max_attempts_wins(conn):
    ok = h.th_fails_until.options(conn=conn).enqueue(ok_at=3)
    capped = h.th_fails_until.options(conn=conn, max_attempts=2).enqueue(ok_at=3)
    summary = drain(conn=conn)
    assert row(conn, ok)[:3] == ("completed", 3, 3)
    assert row(conn, capped)[:2] == ("discarded", 2)
    assert summary.by_kind["th_fails_until"] == KindCounts(completed=1, failed=3, discarded=1)


def test_drain_can_honour_the_backoff(conn):
    job_id = h.th_always_fails.options(conn=conn).enqueue(key="b")
    summary = drain(conn=conn, skip_backoff=False)
    assert [a.outcome for a in summary.attempts] == ["failed"]
    state, attempt, _, _, _, _ = row(conn, job_id)
    assert (state, attempt) == ("retryable", 1)
    due_in = conn.execute("SELECT extract(epoch FROM run_at - now()) FROM supervisor.jobs"
                          " WHERE id = %s", (job_id,)).fetchone()[0]
    assert 0 < due_in <= 1.0  # the first retry's backoff: 0.5 to 1 s


def test_drain_discards_on_discard_at_once(conn):
    job_id = h.th_discards.options(conn=conn).enqueue(why="not a png")
    summary = drain(conn=conn)
    assert [(a.outcome, a.error) for a in summary.attempts] == [
        ("discarded", "discard: not a png")]
    state, attempt, _, errors, _, _ = row(conn, job_id)
    assert (state, attempt, errors[-1]["kind"]) == ("discarded", 1, "discard")


def test_drain_honours_retry_with_a_delay(conn):
    job_id = h.th_retry_later.options(conn=conn).enqueue()
    summary = drain(conn=conn)
    assert [a.outcome for a in summary.attempts] == ["failed"]
    state, attempt, _, errors, far, _ = row(conn, job_id)
    assert (state, attempt, far, errors[-1]["kind"]) == ("retryable", 1, True, "retry")


def test_drain_honours_snooze(conn):
    h.SNOOZED.clear()
    soon = h.th_snooze_once.options(conn=conn).enqueue(key="soon")
    later = h.th_snooze_once.options(conn=conn).enqueue(key="later", delay=3600)
    summary = drain(conn=conn)
    outcomes = [(a.id, a.outcome) for a in summary.attempts]
    assert outcomes == [(soon, "snoozed"), (later, "snoozed"), (soon, "completed")]
    assert row(conn, soon)[:3] == ("completed", 1, "soon after snooze, attempt 1")
    state, attempt, _, errors, far, _ = row(conn, later)
    assert (state, attempt, errors, far) == ("scheduled", 0, [], True)  # attempt unspent


def test_drain_stores_progress_and_bad_results_fail_as_in_a_child(conn):
    p = h.th_progress.options(conn=conn).enqueue()
    nan = h.th_nan.options(conn=conn, max_attempts=1).enqueue()
    drain(conn=conn)
    # Stored as reported, made final as the job completed (done = total; issue 47).
    assert row(conn, p)[5] == {"done": 3, "total": 3, "message": "two of three"}
    state, _, _, errors, _, _ = row(conn, nan)
    assert state == "discarded"
    assert errors[-1]["kind"] == "result"
    assert "result = nan is not a finite number" in errors[-1]["message"]


def test_drain_filters_queues_kinds_and_stops_at_max_jobs(conn):
    add = [h.th_add.options(conn=conn).enqueue(a=i, b=0) for i in range(3)]
    step = h.th_step.options(conn=conn).enqueue(name="s")
    assert drain(queues=["th_steps"], conn=conn).ran == 1
    assert row(conn, step)[0] == "completed"
    assert drain(kinds=[h.th_pid], conn=conn).ran == 0
    assert drain(queues="th", conn=conn, max_jobs=2).ran == 2
    assert [row(conn, i)[0] for i in add] == ["completed", "completed", "available"]


def test_drain_respects_a_paused_queue(conn):
    job_id = h.th_add.options(conn=conn).enqueue(a=1, b=1)
    conn.execute("INSERT INTO supervisor.queues (name, paused) VALUES ('th', true)")
    assert drain(conn=conn).ran == 0
    assert row(conn, job_id)[0] == "available"


def test_a_kind_without_a_handler_is_reported_not_skipped(conn):
    conn.execute("INSERT INTO supervisor.jobs (kind, queue, args) VALUES"
                 " ('nobody_handles_this', 'th', '{}'), ('nobody_handles_this', 'th', '{}')")
    h.th_add.options(conn=conn).enqueue(a=1, b=1)
    with pytest.warns(UserWarning, match="no handler imported for nobody_handles_this"):
        summary = drain(conn=conn)
    assert summary.completed == 1
    assert summary.unhandled == {"nobody_handles_this": 2}
    assert "no handler for nobody_handles_this (2)" in str(summary)
    assert len(enqueued("nobody_handles_this", conn=conn)) == 2  # left waiting, unclaimed


def test_drain_on_a_database_without_the_schema_says_to_migrate(fresh_dsn):
    with pytest.raises(SchemaMissing, match="run `supervisor migrate`"):
        drain(dsn=fresh_dsn)
    with pytest.raises(SchemaMissing, match="run `supervisor migrate`"):
        enqueued(dsn=fresh_dsn)


def test_fork_runs_each_job_in_a_child(conn):
    ids = [h.th_pid.options(conn=conn).enqueue() for _ in range(2)]
    batch = h.th_tile.options(conn=conn).enqueue_many([{"x": 2}, {"x": 3}],
                                                     then=h.th_collect.bind(label="f"))
    summary = drain(conn=conn, fork=True)
    pids = {row(conn, i)[2]["pid"] for i in ids}
    assert os.getpid() not in pids and len(pids) == 2
    assert summary.completed == 5
    callback = conn.execute("SELECT callback_id FROM supervisor.batches WHERE id = %s",
                            (batch.id,)).fetchone()[0]
    assert row(conn, callback)[2]["squares"] == [4, 9]


def test_fork_records_a_crash_and_a_timeout_as_the_pool_does(conn):
    crash = h.th_crash.options(conn=conn).enqueue()
    slow = h.th_sleeps.options(conn=conn).enqueue(seconds=30)
    summary = drain(conn=conn, fork=True)
    assert summary.discarded == 2
    errors = {a.id: a.error for a in summary.attempts}
    assert errors[crash] == "crashed: child exited with code 3"
    assert errors[slow] == "timeout: ran past its 0.5 s timeout"
    assert row(conn, slow)[3][-1]["kind"] == "timeout"


def test_ctrl_c_and_pytest_outcomes_in_a_handler_reach_the_test_and_the_job_goes_back(conn):
    ctrl_c = h.th_interrupted.options(conn=conn).enqueue(how="ctrl-c")
    with pytest.raises(KeyboardInterrupt):
        drain(conn=conn)
    assert row(conn, ctrl_c)[:2] == ("available", 0)  # back, its attempt unspent
    conn.execute("DELETE FROM supervisor.jobs")
    failed = h.th_interrupted.options(conn=conn).enqueue(how="pytest.fail")
    with pytest.raises(pytest.fail.Exception, match="failed from inside the handler"):
        drain(conn=conn)
    assert row(conn, failed)[:2] == ("available", 0)
    conn.execute("DELETE FROM supervisor.jobs")
    # sys.exit() in a handler fails its job, as in a child, and the drain goes on
    exits = h.th_interrupted.options(conn=conn, max_attempts=1).enqueue(how="exit")
    assert drain(conn=conn).attempts[0].error == "error: SystemExit: 3"
    assert row(conn, exits)[0] == "discarded"


def test_a_job_that_snoozes_for_ever_stops_the_drain_with_its_name(conn, monkeypatch):
    from supervisor.testing import draining

    monkeypatch.setattr(draining, "RUNS_PER_JOB_LIMIT", 5)
    job_id = h.th_snoozes_forever.options(conn=conn).enqueue()
    with pytest.raises(RuntimeError, match=rf"job {job_id} \(th_snoozes_forever\) ran 5 times"):
        drain(conn=conn)
    assert row(conn, job_id)[:2] == ("available", 0)  # given back, not left running
    assert drain(queues=["th_forever"], conn=conn, max_jobs=3).snoozed == 3


def test_interrupting_a_forked_drain_kills_the_child_and_gives_the_job_back(conn):
    import signal
    import threading

    job_id = h.th_sleeps.options(conn=conn, timeout=60).enqueue(seconds=30)

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGUSR1, interrupt)
    # Ctrl-C, a second into the job (the child sleeps 30 s)
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGUSR1))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            drain(conn=conn, fork=True)
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR1, previous)
    state, attempt, _, errors, _, _ = row(conn, job_id)
    assert (state, attempt) == ("available", 0)
    assert errors[-1]["kind"] == "shutdown"
    with pytest.raises(ChildProcessError):
        os.waitpid(-1, os.WNOHANG)  # the child was killed and reaped


@pytest.mark.parametrize("fork", [False, True])
def test_a_drained_job_checkpoints_and_its_retry_resumes_from_it(conn, fork):
    job_id = h.th_resumes.options(conn=conn).enqueue(steps=10)
    summary = drain(queues="th", conn=conn, fork=fork)
    assert summary.completed == 1 and summary.failed == 1
    state, attempt, result, *_ = row(conn, job_id)
    assert (state, attempt, result) == ("completed", 2, {"resumed_at": 5, "attempt": 2})
    written = conn.execute("SELECT checkpoint, checkpoint_at IS NOT NULL "
                           "FROM supervisor.jobs WHERE id = %s", (job_id,)).fetchone()
    assert written == ({"next": 5}, True)
