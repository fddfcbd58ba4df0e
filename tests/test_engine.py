"""The engine's job flow against fakes (store, claim connection, pool, clock), with the
real Database wrapper so outages and errors take the real code paths."""

from __future__ import annotations

import logging

import psycopg
import pytest
from engine_fakes import make_engine

from shared.usage import Usage
from supervisor.db import Attempt, KindPause
from supervisor.pool import JobDone
from supervisor.tuning import DEFAULT

CLAIM_CARRY_WAIT, START_HOLD = DEFAULT.claim_carry_wait, DEFAULT.start_hold


def running_two():
    """An engine whose two children each run one of the queue's jobs."""
    engine, db, store, pool, clock = make_engine()
    store.add(n=2)
    engine.tick(clock.now, pool)
    db.claims.answer()
    engine.tick(clock.now, pool)
    assert pool.busy_count() == 2
    return engine, db, store, pool, clock


def test_claims_only_what_the_idle_children_can_start():
    engine, db, store, pool, clock = make_engine(children=2)
    store.add(n=5)
    engine.tick(clock.now, pool)
    (params, _), = db.claims.sent
    assert params["limit"] == 2 and params["completions"] == []
    db.claims.answer()
    engine.tick(clock.now, pool)
    assert sorted(pool.jobs) == [1, 2]
    assert not db.claims.sent  # nothing more can start: no claim


def test_a_completion_rides_on_the_next_claim_not_a_statement_of_its_own():
    engine, db, store, pool, clock = running_two()
    store.add(n=1)
    pool.finish(1)
    clock.now += 0.001
    engine.tick(clock.now, pool)
    (params, _), = db.claims.sent
    assert [c.id for c in params["completions"]] == [1]
    db.claims.answer()
    clock.now += 1.0
    engine.tick(clock.now, pool)
    assert "complete" not in store.names()


def busy_with_a_window_of_four():
    """Two children at prefetch 2: each runs a job and one more waits here for it; the
    queue holds more (so the next claim is sure to come once half the window is free)."""
    engine, db, store, pool, clock = make_engine(children=2, prefetch=2)
    store.add(n=20)
    engine.tick(clock.now, pool)
    (params, _), = db.claims.sent
    assert params["limit"] == 4
    db.claims.answer()
    engine.tick(clock.now, pool)
    assert sorted(pool.jobs) == [1, 2] and not db.claims.sent
    return engine, db, store, pool, clock


def test_completions_wait_for_the_claim_of_half_a_window_not_a_claim_each():
    """Issue 31: a completion past the flush interval no longer forces a claim for the
    one place it freed (one claim and commit per job or two for 20 ms jobs): it waits
    for the claim that half a free window sends, which carries both completions."""
    engine, db, store, pool, clock = busy_with_a_window_of_four()
    pool.finish(1)
    clock.now += 0.001
    engine.tick(clock.now, pool)  # job 3 goes to the free child: one place free of four
    clock.now += 0.03  # past the flush interval (0.02 s)
    engine.tick(clock.now, pool)
    assert not db.claims.sent and "complete" not in store.names()
    pool.finish(2)
    clock.now += 0.001
    engine.tick(clock.now, pool)
    (params, _), = db.claims.sent
    assert params["limit"] == 2
    assert sorted(c.id for c in params["completions"]) == [1, 2]
    db.claims.answer()
    engine.tick(clock.now, pool)
    assert "complete" not in store.names()


def test_a_completion_waits_for_a_coming_claim_no_longer_than_its_bound():
    engine, db, _store, pool, clock = busy_with_a_window_of_four()
    pool.finish(1)
    engine.tick(clock.now, pool)
    clock.now += CLAIM_CARRY_WAIT + 0.001
    engine.tick(clock.now, pool)  # no second place freed: the claim goes for one
    (params, _), = db.claims.sent
    assert params["limit"] == 1 and [c.id for c in params["completions"]] == [1]


def test_completions_of_jobs_of_100_ms_or_more_do_not_wait_for_a_claim():
    """Beside a job of 0.1 s or more one claim per job costs little, and holding the
    claim for half a window let children wait for a late one. Issue 43: with two
    children no other completion is due within the flush interval, so waiting it out
    batched nothing and cost the loop a timer wake per job: the claim carrying the
    completion goes out in the turn that read it, not a flush interval later."""
    engine, db, _store, pool, clock = busy_with_a_window_of_four()
    job = pool.jobs.pop(1)
    pool.idle += 1
    pool.outcomes.append(JobDone(job, '{"ok": true}', 0.2, Usage(0.2, 0.2, 1 << 20)))
    engine.tick(clock.now, pool)  # job 3 goes to the free child: one place free of four
    (params, _), = db.claims.sent
    assert params["limit"] == 1 and [c.id for c in params["completions"]] == [1]
    assert not engine.outbox.pending.completions  # nothing left for a timer to write


def test_completions_of_100_ms_jobs_with_a_pipe_of_two_ride_the_next_claim():
    """Two children of 100 ms jobs with a pipe of two: the child that ends has its next
    job queued, so its completion waits for the claim the other child's end sends (50
    ms later on average) instead of a claim of its own at once. Issue 43: runs whose
    jobs measured just over 0.1 s sent a claim per job (298 for 300 jobs), those just
    under one per 2.7."""
    engine, db, store, pool, clock = make_engine(children=2, prefetch=2)
    store.add(n=20)
    engine.tick(clock.now, pool)
    db.claims.answer()  # two run, two wait
    engine.tick(clock.now, pool)
    assert pool.busy_count() == 2 and not db.claims.sent
    for job_id in (1, 2):
        job = pool.jobs.pop(job_id)
        pool.idle += 1
        pool.outcomes.append(JobDone(job, '{"ok": true}', 0.104, Usage(0.1, 0.1, 1 << 20)))
        engine.tick(clock.now, pool)
        if job_id == 1:
            assert not db.claims.sent  # waits for the claim the next end sends
            clock.now += 0.05
    (params, _), = db.claims.sent
    assert params["limit"] == 2 and [c.id for c in params["completions"]] == [1, 2]


def test_long_jobs_completions_wait_for_the_claim_many_children_will_send():
    """Sixteen children of 100 ms jobs with a pipe of two end one every 6 ms: each end
    frees a place the next claim fills, and no child waits for that claim (its next
    job is queued), so completions wait for it up to ``claim_carry_wait`` instead of
    the flush interval (issue 43): eight ride one write here, where a carry every 20 ms
    took three or four."""
    engine, db, store, pool, clock = make_engine(children=16, prefetch=2)
    store.add(n=80)
    engine.tick(clock.now, pool)
    db.claims.answer()
    engine.tick(clock.now, pool)
    assert pool.busy_count() == 16 and not db.claims.sent
    began = clock.now
    for job_id in range(1, 9):  # eight ends, 6 ms apart: 48 ms
        job = pool.jobs.pop(job_id)
        pool.idle += 1
        pool.outcomes.append(JobDone(job, '{"ok": true}', 0.1, Usage(0.1, 0.1, 1 << 20)))
        clock.now += 0.006
        engine.tick(clock.now, pool)
    assert not db.claims.sent  # past the flush interval, within the carry wait
    clock.now = began + 0.006 + CLAIM_CARRY_WAIT + 0.001  # the first one's wait is over
    engine.tick(clock.now, pool)
    (params, _), = db.claims.sent
    assert sorted(c.id for c in params["completions"]) == list(range(1, 9))


def test_a_completion_carrying_an_unwritten_start_waits_no_longer_than_the_start_hold():
    """A job that ran 0.45 s with its start never carried (no claim meanwhile) has only
    its completion to record that start: the wait for a coming claim ends at the
    start's START_HOLD, so a supervisor killed after it cannot leave a start unwritten
    longer than it could before the wait (the chaos checker allows 0.5 s)."""
    engine, db, store, pool, clock = make_engine(children=1, prefetch=3)
    store.add(n=20)
    engine.tick(clock.now, pool)
    db.claims.answer()  # job 1 runs, 2 and 3 wait: the window of 3 is full
    engine.tick(clock.now, pool)
    engine.tick(clock.now, pool)  # its START is booked
    began = clock.now
    clock.now = began + 0.45
    pool.finish(1)
    engine.tick(clock.now, pool)  # job 2 starts; one place free of three: no claim yet
    assert not db.claims.sent
    clock.now = began + START_HOLD + 0.001  # before since + CLAIM_CARRY_WAIT
    engine.tick(clock.now, pool)
    (params, _), = db.claims.sent
    assert [(c.id, c.ran) for c in params["completions"]] == [(1, pytest.approx(0.45))]


def test_a_completion_no_claim_will_carry_is_written_within_the_flush_interval():
    """The queue came back short (no work left for now): no claim is coming, so the
    completion is written after the flush interval, not held; it goes on the claim
    connection in a claim of no job, so the loop does not wait for it (issue 48)."""
    engine, db, store, pool, clock = make_engine(children=2, prefetch=2)
    store.add(n=3)
    engine.tick(clock.now, pool)
    db.claims.answer()  # 3 of the 4 asked for: the queue is empty for now
    engine.tick(clock.now, pool)
    pool.finish(1)
    engine.tick(clock.now, pool)
    assert "complete" not in store.names() and not db.claims.sent
    clock.now += 0.03
    engine.tick(clock.now, pool)
    (params, _), = db.claims.sent
    assert params["limit"] == 0 and [c.id for c in params["completions"]] == [1]
    assert "complete" not in store.names()  # nothing written that blocks the loop
    assert engine.claim_in_flight and not engine.outbox.count()
    depth_latency = engine.planner.depth.latency
    assert db.claims.answer() == []
    assert engine.planner.depth.latency == depth_latency  # no claim was measured
    assert not engine.claim_in_flight and not engine.outbox.count()


def test_a_carry_that_fails_hands_its_completions_back_to_be_written():
    """A claim of no job that fails (the connection dropped) loses nothing: its
    completions wait in the outbox again and are written when the database is back."""
    engine, db, store, pool, clock = make_engine(children=2, prefetch=2)
    store.add(n=3)
    engine.tick(clock.now, pool)
    db.claims.answer()
    engine.tick(clock.now, pool)
    pool.finish(1)
    engine.tick(clock.now, pool)
    clock.now += 0.03
    engine.tick(clock.now, pool)
    (params, _), = db.claims.sent
    assert params["limit"] == 0
    db.claims.fail(psycopg.errors.QueryCanceled("canceling statement due to statement timeout"))
    assert [c.id for c in engine.outbox.pending.completions] == [1]


def test_completions_wait_for_a_claim_in_flight_past_the_write_batch():
    """Only completions wait and a claim is out: its answer lets the next claim carry
    them however many they are, rather than a blocking write of the batch (issue 48:
    500 completions written at once held the loop 100-500 ms on a busy server)."""
    from shared.jobs import ClaimedJob
    from supervisor.engine.outbox import Outbox
    from supervisor.observe.metrics import SupervisorMetrics
    outbox = Outbox(SupervisorMetrics("me"), 0.02)
    for job_id in range(1, DEFAULT.write_batch + 10):
        outbox.completed(ClaimedJob(job_id, "k", "default", 1, 5, 0, None, "{}"), "1", 100.0)
    assert outbox.next_flush_at(claim_in_flight=True) == 100.0 + DEFAULT.carry_limit
    assert outbox.next_flush_at(claim_in_flight=False) == 100.0  # no claim: at once
    assert outbox.carries_alone()


def test_the_depth_counts_the_childs_run_time_not_the_parents_reading_of_it():
    """Issue 31: a loaded parent reads a job's START and DONE in one turn, so its own
    measure of the run is zero; the child's (its usage) is what the depth is sized by.
    A first sample of zero made the depth its maximum (a claim of 512 jobs)."""
    engine, _db, _store, pool, clock = running_two()
    job = pool.jobs.pop(1)
    pool.idle += 1
    pool.outcomes.append(JobDone(job, '{"ok": true}', 0.0, Usage(0.03, 0.03, 1 << 20)))
    engine.tick(clock.now, pool)
    assert engine.run_times.queue_average("default") == pytest.approx(0.03)
    assert engine.planner.depth.depth("default", None) < 10


def test_a_failure_is_written_within_the_flush_interval():
    engine, _db, store, pool, clock = running_two()
    pool.fail(2)
    engine.tick(clock.now, pool)
    assert "fail" not in store.names()
    clock.now += 0.05
    engine.tick(clock.now, pool)
    assert ("fail", [(2, "error")]) in store.calls


def test_a_result_postgres_refuses_is_written_alone_and_never_carried_again():
    engine, db, store, pool, clock = running_two()
    pool.finish(1, result='{"s": "\\u0000"}')
    engine.tick(clock.now, pool)
    (params, _), = db.claims.sent
    assert [c.id for c in params["completions"]] == [1]
    db.claims.fail(psycopg.DataError("unsupported Unicode escape sequence"))
    assert db.up  # a refused value is not an outage
    clock.now += 0.05
    engine.tick(clock.now, pool)
    assert ("complete", [1]) in store.calls
    assert all(p["completions"] == [] for p, _ in db.claims.sent)


def test_drain_releases_claimed_jobs_that_have_not_started():
    engine, db, store, pool, clock = make_engine(children=1, prefetch=3)
    store.add(n=3)
    engine.tick(clock.now, pool)
    db.claims.answer()
    engine.tick(clock.now, pool)
    assert list(pool.jobs) == [1]
    assert engine.drain(clock.now) == 2
    assert ("release", [2, 3]) in store.calls
    store.add(n=5)
    clock.now += 2.0
    engine.tick(clock.now, pool)
    assert not db.claims.sent  # draining: nothing more is claimed


def test_when_every_child_is_stuck_on_a_long_job_claimed_jobs_go_back_to_the_table():
    # Issue 28: waiting here, leased, they would wait for the first long job to end;
    # in the table any supervisor's next claim with a free child takes them.
    engine, db, store, pool, clock = make_engine(children=1, prefetch=3)
    store.add(n=3)
    engine.tick(clock.now, pool)
    db.claims.answer()
    engine.tick(clock.now, pool)
    assert list(pool.jobs) == [1] and engine.ledger.waiting_counts() == {"default": 2}
    pool.stuck = 1
    clock.now += 0.1
    engine.tick(clock.now, pool)
    assert engine.ledger.waiting_counts() == {}
    clock.now += 1.0
    engine.tick(clock.now, pool)
    assert ("release", [2, 3]) in store.calls
    assert not db.claims.sent  # and no claim for a child that cannot take it


def test_a_claim_answered_after_the_drain_began_gives_its_jobs_back():
    engine, db, store, pool, clock = make_engine(children=2)
    store.add(n=2)
    engine.tick(clock.now, pool)
    assert db.claims.sent
    engine.drain(clock.now)
    db.claims.answer()
    clock.now += 0.05
    engine.tick(clock.now, pool)
    assert ("release", [1, 2]) in store.calls
    assert pool.busy_count() == 0 and engine.ledger.idle()


def test_while_the_database_is_away_the_loop_sleeps_until_the_next_reconnect():
    engine, db, store, pool, clock = running_two()
    db.break_connection()
    db.server_up = False
    calls = len(store.calls)
    waits = []
    for _ in range(50):
        engine.tick(clock.now, pool)
        wait = engine.next_deadline(clock.now, pool) - clock.now
        waits.append(wait)
        clock.now += max(wait, 0.0)
    assert min(waits) > 0.0, "a zero timeout while down makes the loop spin"
    assert max(waits) <= 1.0, "back within about a second of the server answering"
    assert len(store.calls) == calls  # nothing was sent to a database that is away


def test_after_an_outage_longer_than_the_lease_it_writes_renews_and_reconciles_first():
    engine, db, store, pool, clock = running_two()
    clock.now += 6.0
    engine.tick(clock.now, pool)  # a maintenance round while up: this one may lead
    db.break_connection()
    db.server_up = False
    pool.finish(1)
    clock.now += 0.01
    engine.tick(clock.now, pool)
    clock.now += 45.0  # longer than the 30 s lease
    db.server_up = True
    store.calls.clear()
    engine.tick(clock.now, pool)
    names = store.names()
    # Job 2's START came in after the outage began: its start is written with the rest.
    assert names[:4] == ["complete", "started", "renew", "reconcile"], names
    assert ("reconcile", [2]) in store.calls  # job 2 still runs here: it is kept
    assert "lead" not in names, "no rescue right after our own outage"
    clock.now += 31.0
    engine.tick(clock.now, pool)
    assert "lead" in store.names()


@pytest.mark.parametrize("statement", ["beat", "poll", "promote", "renew"])
def test_a_statement_error_is_logged_and_the_engine_goes_on(statement, caplog):
    engine, db, store, pool, clock = running_two()
    store.fail_next[statement] = psycopg.errors.UndefinedTable("relation does not exist")
    with caplog.at_level(logging.ERROR, logger="supervisor.database"):
        for _ in range(3):
            clock.now += 11.0  # every timer is due: poll, renew, maintenance
            engine.tick(clock.now, pool)
    assert db.up
    assert any("failed, will try again" in r.getMessage() for r in caplog.records)
    assert store.names().count(statement) >= 2  # tried again later


def test_a_claim_that_fails_for_its_statement_is_tried_again(caplog):
    engine, db, store, pool, clock = make_engine()
    store.add(n=2)
    engine.tick(clock.now, pool)
    with caplog.at_level(logging.ERROR, logger="supervisor.database"):
        db.claims.fail(psycopg.errors.QueryCanceled("canceling statement due to timeout"))
    assert db.up
    clock.now += 0.01
    engine.tick(clock.now, pool)
    assert db.claims.sent
    db.claims.answer()
    engine.tick(clock.now, pool)
    assert pool.busy_count() == 2


def test_operator_cancel_kills_the_running_job_and_drops_a_waiting_one():
    engine, db, store, pool, clock = make_engine(children=1, prefetch=2)
    store.add(n=2)
    engine.tick(clock.now, pool)
    db.claims.answer()
    engine.tick(clock.now, pool)
    db.cancelled_jobs.update({1, 2})
    engine.tick(clock.now, pool)
    assert sorted(pool.cancelled) == [1, 2]
    assert engine.ledger.waiting_jobs() == []


def test_burst_ends_only_when_nothing_is_held_or_left():
    engine, db, store, pool, clock = make_engine(burst=True)
    store.add(n=1)
    engine.tick(clock.now, pool)
    db.claims.answer()
    engine.tick(clock.now, pool)
    clock.now += 0.2
    engine.tick(clock.now, pool)
    assert not engine.burst_finished  # a job is running
    pool.finish(1)
    clock.now += 0.2
    engine.tick(clock.now, pool)
    clock.now += 0.2
    engine.tick(clock.now, pool)
    if db.claims.sent:  # the completion rode on a claim: the server answers it
        db.claims.answer()
        clock.now += 0.2
        engine.tick(clock.now, pool)
    assert engine.burst_finished


def test_a_paused_queue_gives_back_what_it_claimed_but_has_not_started():
    engine, db, store, pool, clock = make_engine(children=1, prefetch=4)
    store.add(n=4)
    engine.tick(clock.now, pool)
    db.claims.answer()
    engine.tick(clock.now, pool)
    assert list(pool.jobs) == [1]
    store.paused.add("default")
    db.paused_queues.add("default")  # the NOTIFY of the pause
    engine.tick(clock.now, pool)
    clock.now += 0.05
    engine.tick(clock.now, pool)
    assert ("release", [2, 3, 4]) in store.calls
    assert pool.notified == []  # a plain pause: the running job goes on
    pool.finish(1)
    engine.tick(clock.now, pool)
    assert pool.busy_count() == 0


def test_a_pause_with_stop_running_tells_the_queues_running_jobs_and_they_go_back():
    engine, db, store, pool, clock = running_two()
    store.paused.add("default")
    store.stop_running.add("default")
    db.paused_queues.add("default")  # the NOTIFY of the pause
    engine.tick(clock.now, pool)
    # The fake pool's handlers ignore the notice: each is killed after kill_grace.
    assert sorted(pool.notified) == [(1, "pause"), (2, "pause")]
    clock.now += 0.05
    engine.tick(clock.now, pool)
    engine.flush(clock.now)
    assert [name for name, _ in store.calls if name in ("interrupt", "fail")] == ["interrupt"]


def test_a_missed_stop_running_notify_is_caught_by_the_poll():
    engine, _db, store, pool, clock = running_two()
    store.paused.add("default")
    store.stop_running.add("default")  # no NOTIFY: say, sent while reconnecting
    clock.now += 2 * engine.config.poll_interval
    engine.tick(clock.now, pool)
    assert sorted(pool.notified) == [(1, "pause"), (2, "pause")]


def test_a_written_retry_makes_the_engine_look_for_its_due_time_soon():
    engine, _db, store, pool, clock = running_two()
    clock.now += 0.5
    engine.tick(clock.now, pool)
    polls = store.names().count("poll")
    pool.fail(1)
    engine.tick(clock.now, pool)
    clock.now += 0.05
    engine.tick(clock.now, pool)  # the failure is written
    clock.now += 0.06
    engine.tick(clock.now, pool)
    assert store.names().count("poll") > polls


def test_a_short_jobs_start_is_never_written_its_completion_carries_it():
    # Issue 31: a start is held back; a job that ends within START_HOLD has its start
    # carried by its completion (``ran``), so its row is written twice per attempt.
    engine, db, store, pool, clock = make_engine(children=2)
    store.add(n=3)
    engine.tick(clock.now, pool)
    db.claims.answer()
    engine.tick(clock.now, pool)  # two jobs go to children, which say START
    engine.tick(clock.now, pool)  # the starts are booked
    assert sorted(engine.outbox.pending.starts) == [1, 2]
    pool.finish(1)
    clock.now += 0.01
    engine.tick(clock.now, pool)  # the completion rides on a claim; job 2's start stays
    (params, _), = db.claims.sent
    (done,) = params["completions"]
    assert done.id == 1 and done.ran == pytest.approx(0.01)
    assert list(params["starts"]) == []
    assert list(engine.outbox.pending.starts) == [2]
    db.claims.answer()
    engine.tick(clock.now, pool)  # job 3 goes to the free child
    engine.tick(clock.now, pool)
    clock.now += 0.02
    pool.finish(2)
    pool.finish(3)
    for _ in range(3):
        engine.tick(clock.now, pool)
        if db.claims.sent:
            db.claims.answer()
    clock.now += 1.0
    engine.tick(clock.now, pool)
    written = [c for c in store.calls if c[0] == "started"]
    assert written == [], "no start of a job that ended within the hold is written"
    assert engine.outbox.count() == 0 and not engine.outbox.pending.starts


def test_a_long_jobs_start_rides_on_a_claim_once_old_or_is_written_within_the_hold():
    START_CARRY_AGE = DEFAULT.start_carry_age

    engine, db, store, pool, clock = make_engine(children=2)
    store.add(n=3)
    engine.tick(clock.now, pool)
    db.claims.answer()
    engine.tick(clock.now, pool)
    engine.tick(clock.now, pool)  # jobs 1 and 2 started
    clock.now += START_CARRY_AGE + 0.01
    pool.finish(1)
    engine.tick(clock.now, pool)  # a claim goes out: job 2's start is old enough to ride
    (params, _), = db.claims.sent
    assert list(params["starts"]) == [Attempt(2, 1)]
    assert engine.outbox.pending.starts == {}
    db.claims.answer()
    engine.tick(clock.now, pool)  # job 3 goes to a child
    engine.tick(clock.now, pool)  # its start is booked; nothing else is due
    assert list(engine.outbox.pending.starts) == [3]
    clock.now += START_HOLD / 2
    engine.tick(clock.now, pool)
    assert ("started", [3]) not in store.calls  # not yet: its outcome may carry it
    deadline = engine.next_deadline(clock.now, pool)
    assert deadline <= clock.now + START_HOLD / 2 + 1e-9
    clock.now += START_HOLD / 2 + 0.001
    engine.tick(clock.now, pool)
    # Written within the hold, in a claim of no job (it does not hold the loop).
    (params, _), = db.claims.sent
    assert params["limit"] == 0 and list(params["starts"]) == [Attempt(3, 1)]
    assert ("started", [3]) not in store.calls


def test_prefetch_depth_follows_run_times():
    from supervisor.engine.depth import PrefetchDepth
    MAX_DEPTH, MAX_PIPELINE = DEFAULT.max_depth, DEFAULT.max_pipeline
    from supervisor.pool import RunTimes

    depth = PrefetchDepth(RunTimes())
    assert depth.depth("q", None) == 1  # nothing measured: one per child
    assert depth.depth("q", 8) == 8  # a configured prefetch wins
    for _ in range(50):
        depth.claimed(0.004)
        depth.run_times.ran("q", "q", 0.001)
        depth.run_times.ran("noop", "noop", 0.00002)
        depth.run_times.ran("long", "long", 2.0)
    # 2 x 4 ms of 1 ms jobs, the one in hand and a spare
    assert depth.depth("q", None) in (10, 11)
    assert depth.depth("noop", None) == MAX_DEPTH
    assert depth.depth("long", None) == 2  # the one in hand and the next: no spare
    assert depth.pipeline("q", None) in (10, 11)  # all it holds for a child, in its pipe
    assert depth.pipeline("noop", None) == MAX_PIPELINE
    assert depth.pipeline("long", None) == 1 and depth.pipeline("q", 3) == 3
    depth.claimed(0.040)  # one slow claim raises the depth at once ...
    assert depth.depth("q", None) >= 80
    for _ in range(100):
        depth.claimed(0.004)  # ... and it comes down as claims are quick again
    assert depth.depth("q", None) <= 12


def test_dispatch_metrics_count_rate_limited_plans_and_empty_claims():
    from supervisor.queue_policy import QueuePolicy

    policy = QueuePolicy(name="default", max_rate=1.0, burst=1)
    engine, db, store, pool, clock = make_engine(queue_policies={"default": policy})
    store.add(n=2)
    engine.tick(clock.now, pool)
    (params, _), = db.claims.sent
    assert params["limit"] == 1  # two children idle, one token
    db.claims.answer()
    clock.now += 1.5
    engine.tick(clock.now, pool)  # a token again: the next claim goes out
    store.available.clear()  # ...and another supervisor took the job meanwhile
    db.claims.answer()
    text = engine.metrics.render().decode()
    assert 'supervisor_claims_rate_limited_total{queue="default"} 1' in text
    assert 'supervisor_claims_empty_total{queue="default"} 1' in text
    assert 'supervisor_rate_tokens_refunded_total{queue="default"} 1' in text


def test_a_job_that_ends_before_its_start_is_written_leaves_no_write_due():
    # Its completion carries the start; a start time left behind made the loop spin
    # (a zero wait every turn) until the next claim. Two children, one job: the claim
    # came back short, so no claim follows and the completion is written on its own.
    engine, db, store, pool, clock = make_engine(children=2)
    store.add(n=1)
    engine.tick(clock.now, pool)
    db.claims.answer()
    engine.tick(clock.now, pool)
    engine.tick(clock.now, pool)  # the START is booked
    assert list(engine.outbox.pending.starts) == [1]
    pool.finish(1)
    clock.now += 0.005
    for _ in range(3):
        engine.tick(clock.now, pool)
        if db.claims.sent:
            db.claims.answer()
    clock.now += 0.1
    engine.tick(clock.now, pool)
    assert engine.outbox.count() == 0
    assert engine.next_deadline(clock.now, pool) > clock.now


def test_the_last_outcome_of_a_burst_is_written_at_once_and_the_burst_ends_then():
    engine, db, store, pool, clock = make_engine(children=1, burst=True)
    store.add(n=1)
    engine.tick(clock.now, pool)
    db.claims.answer()
    engine.tick(clock.now, pool)
    for _ in range(5):  # the job runs a while; the burst check finds it running
        clock.now += 0.03
        engine.tick(clock.now, pool)
    pool.finish(1)
    engine.tick(clock.now, pool)  # no time passes: nothing runs, so nothing waits
    if db.claims.sent:
        db.claims.answer()
        engine.tick(clock.now, pool)
    assert "complete" in store.names() or engine.outbox.count() == 0
    assert engine.burst_finished


def test_the_first_claim_goes_out_before_the_first_poll():
    """At start the idle children wait for the first claim's answer only: the claim is
    sent first and the poll's statements run while the database executes it."""
    engine, db, store, pool, clock = make_engine()
    store.add("default", 2)
    claims_out_at_promote: list[int] = []
    promote = store.promote_due

    def promote_due(limit: int = 1000) -> int:
        claims_out_at_promote.append(len(db.claims.sent))
        return promote(limit)

    store.promote_due = promote_due
    engine.tick(clock.now, pool)
    assert claims_out_at_promote == [1]
    assert db.claims.sent[0][0]["queue"] == "default"
    assert [job.id for job in db.claims.answer()] == [1, 2]


def test_the_first_claim_leaves_out_kinds_paused_before_the_start():
    """The claim sent ahead of the poll still knows the paused kinds: read first."""
    engine, db, store, pool, clock = make_engine()
    store.add("default", 2)
    store.paused_kinds = lambda: {"k": KindPause("paused by hand", None)}
    engine.tick(clock.now, pool)
    assert [params["kinds"] for params, _ in db.claims.sent] in ([], [[]])


def test_an_idle_child_is_offered_queued_jobs_only_once_the_queue_is_empty():
    """The engine asks the pool to rebalance while a child is idle and nothing waits
    here, and says the queue is done only once its claim came back short."""
    engine, db, store, pool, clock = make_engine()
    store.add("default", 1)
    engine.tick(clock.now, pool)
    db.claims.answer()  # one job for two children: the claim came back short
    engine.tick(clock.now, pool)
    assert pool.rebalanced and pool.rebalanced[-1] is True
    store.add("default", 3)
    engine.planner.wake(["default"])  # a NOTIFY: the queue holds work again
    pool.rebalanced.clear()
    engine.tick(clock.now, pool)
    assert pool.rebalanced[-1] is False


def test_jobs_of_5_to_100_ms_are_held_a_tenth_of_a_second_deep_but_not_a_heavy_tail():
    """Issue 31: 20 ms jobs are claimed 0.1 s of work per child at a time (five), not
    three; a queue of 2 ms jobs with a rare 3 s one keeps the latency's depth after its
    long run, as its typical job is still 2 ms."""
    from supervisor.engine.depth import PrefetchDepth
    from supervisor.pool import RunTimes

    even = PrefetchDepth(RunTimes())
    for _ in range(20):
        even.run_times.ran("k", "q", 0.02)
    assert even.depth("q", None) == 5
    tailed = PrefetchDepth(RunTimes())
    for _ in range(199):
        tailed.run_times.ran("k", "q", 0.002)
    plain = tailed.depth("q", None)
    tailed.run_times.ran("k", "q", 3.0)
    depths = []
    for _ in range(30):
        tailed.run_times.ran("k", "q", 0.002)
        depths.append(tailed.depth("q", None))
    assert max(depths) <= plain, (plain, depths)
