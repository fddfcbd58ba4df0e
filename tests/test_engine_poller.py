"""``engine.polling.Poller`` over fakes: the start's claim before the first poll, the
poll's interval, event-driven polls held to ``MIN_POLL_GAP``, a job due soon promoted
``PROMOTE_AGAIN`` later, and what paused kinds and queues give back."""

from __future__ import annotations

from engine_fakes import make_engine

from shared.jobs import ClaimedJob
from supervisor.db import KindPause
from supervisor.engine.polling import MIN_POLL_GAP, POLL_JITTER_HIGH, POLL_JITTER_LOW, PROMOTE_AGAIN


def job(job_id: int, queue: str = "default", kind: str = "k") -> ClaimedJob:
    return ClaimedJob(job_id, kind, queue, 1, 5, 0, None, "{}")


def test_the_first_claim_goes_out_before_the_first_poll_then_polls_keep_their_interval():
    engine, db, store, pool, clock = make_engine(poll_interval=1.0)
    poller = engine.poller
    poller.tick(clock.now, pool)
    assert db.claims.sent and "poll" in store.names()
    assert not poller.claim_before_poll
    assert (clock.now + POLL_JITTER_LOW <= poller.next_poll
            <= clock.now + POLL_JITTER_HIGH)
    store.calls.clear()
    poller.tick(poller.next_poll - 0.001, pool)
    assert "poll" not in store.names()
    poller.tick(poller.next_poll, pool)
    assert "poll" in store.names()


def test_an_event_asks_for_a_poll_no_sooner_than_the_gap_after_the_last():
    engine, _db, _store, pool, clock = make_engine(poll_interval=5.0)
    poller = engine.poller
    poller.poll(clock.now, pool)
    poller.next_poll = clock.now + 5.0
    poller.soon(clock.now + 0.01)
    assert poller.next_poll == clock.now + MIN_POLL_GAP
    poller.right_away(clock.now + 0.02)
    assert poller.next_poll == clock.now + 0.02


def test_a_job_found_due_during_the_poll_is_promoted_a_moment_later():
    engine, _db, store, pool, clock = make_engine()
    store.seconds_until_due = lambda queues, kinds: 0.0
    engine.poller.poll(clock.now, pool)
    assert engine.poller.next_promote == clock.now + PROMOTE_AGAIN
    assert engine.poller.next_promote in engine.poller.deadlines()
    store.calls.clear()
    engine.poller.tick(clock.now + PROMOTE_AGAIN, pool)
    assert "promote" in store.names()


def test_a_paused_kind_leaves_the_claims_and_its_waiting_jobs_go_back():
    engine, _db, store, _pool, clock = make_engine()
    engine.ledger.add_claimed([job(1), job(2, kind="other")])
    store.paused_kinds = lambda: {"k": KindPause("paused by hand", None)}
    engine.poller.read_kind_pauses(clock.now)
    assert "k" not in engine.claimer.kinds
    assert [j.id for j in engine.outbox.pending.releases] == [1]
    assert [j.id for j in engine.ledger.waiting_jobs()] == [2]
    store.paused_kinds = lambda: {}
    engine.poller.read_kind_pauses(clock.now)
    assert "k" in engine.claimer.kinds


def test_a_paused_queue_gives_back_what_waits_and_with_stop_running_stops_its_jobs():
    engine, _db, _store, pool, clock = make_engine(queues=("a", "b"))
    pool.dispatch(job(1, "a"))
    pool.dispatch(job(2, "b"))
    engine.ledger.add_claimed([job(3, "a"), job(4, "b")])
    engine.poller.paused({"a": True}, clock.now, pool)
    assert pool.notified == [(1, "pause")]
    assert [j.id for j in engine.outbox.pending.releases] == [3]
    assert [j.id for j in engine.ledger.waiting_jobs()] == [4]


def test_a_pause_notice_the_database_cannot_detail_still_pauses_without_stopping():
    engine, db, _store, pool, clock = make_engine()
    pool.dispatch(job(1))
    engine.ledger.add_claimed([job(2)])
    db.break_connection()
    engine.poller.notified_pauses({"default"}, clock.now, pool)
    assert not pool.notified
    assert [j.id for j in engine.outbox.pending.releases] == [2]
