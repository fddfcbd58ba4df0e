"""``engine.polling.Poller`` over fakes: the start's claim before the first poll, the
poll's interval, event-driven polls held to ``MIN_POLL_GAP``, a job due soon promoted
``PROMOTE_AGAIN`` later, and what paused kinds and queues give back."""

from __future__ import annotations

from engine_fakes import make_engine

from shared.defaults import SETTINGS_FALLBACK
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


def _counting_kind_reads(store, pauses):
    reads: list[int] = []

    def paused_kinds():
        reads.append(1)
        return dict(pauses)

    store.paused_kinds = paused_kinds
    return reads


def test_a_listening_poller_reads_kind_pauses_only_when_told_or_at_the_fallback():
    """Issue 43: kind pauses were read at every poll (one of an idle supervisor's five
    statements a second). With LISTEN, schema 0031's trigger tells of a change; a poll
    reads them then, after a reconnection, or every ``SETTINGS_FALLBACK``."""
    engine, db, store, pool, clock = make_engine()
    reads = _counting_kind_reads(store, {})
    poller = engine.poller
    poller.poll(clock.now, pool)
    assert len(reads) == 1
    for _ in range(5):  # polls a second apart, nothing changed
        clock.now += 1.0
        poller.poll(clock.now, pool)
    assert len(reads) == 1
    store.paused_kinds = lambda: {"k": KindPause("paused by hand", None)}
    db.settings_changed.add("kind_pauses")  # the trigger's NOTIFY
    clock.now += 0.01
    engine.tick(clock.now, pool)  # hears it
    poller.poll(clock.now, pool)
    assert "k" not in engine.claimer.kinds
    reads = _counting_kind_reads(store, {"k": KindPause("paused by hand", None)})
    clock.now += SETTINGS_FALLBACK
    poller.poll(clock.now, pool)
    assert len(reads) == 1  # the fallback's
    poller.right_away(clock.now)  # as after a reconnection: no notice was heard
    poller.poll(clock.now, pool)
    assert len(reads) == 2


def test_a_timed_kind_pause_is_read_again_when_it_runs_out():
    engine, _db, store, pool, clock = make_engine()
    reads = _counting_kind_reads(store, {"k": KindPause("breaker tripped", 3.0)})
    poller = engine.poller
    poller.poll(clock.now, pool)
    assert "k" not in engine.claimer.kinds
    clock.now += 2.0
    poller.poll(clock.now, pool)
    assert len(reads) == 1
    reads = _counting_kind_reads(store, {})  # the cooldown is over
    clock.now += 1.0
    poller.poll(clock.now, pool)
    assert len(reads) == 1 and "k" in engine.claimer.kinds


def test_without_listen_kind_pauses_are_read_at_every_poll():
    engine, db, store, pool, clock = make_engine()
    db.listen = False  # behind a pooler in transaction mode: no notice comes
    reads = _counting_kind_reads(store, {})
    for _ in range(3):
        engine.poller.poll(clock.now, pool)
        clock.now += 1.0
    assert len(reads) == 3
