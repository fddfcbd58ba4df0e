"""``engine.fencing.LeaseKeeper`` over fakes: renewals every third of a lease, the
fence deadline and the fence itself, an outage's hold-back once per outage, the
reconnect's writes, renewal and reconcile, and an operator's cancels."""

from __future__ import annotations

import psycopg
from engine_fakes import FakePool, make_engine

from shared.jobs import ClaimedJob
from supervisor.engine.fencing import RENEWALS_PER_LEASE


def job(job_id: int, queue: str = "default") -> ClaimedJob:
    return ClaimedJob(job_id, "k", queue, 1, 5, 0, None, "{}")


class CountingPool(FakePool):
    """Records every take_back, as children holding jobs queued would answer it."""

    def __init__(self, size: int = 2) -> None:
        super().__init__(size)
        self.taken_back: list[str] = []

    def take_back(self, queue: str) -> int:
        self.taken_back.append(queue)
        return 0


def running_one():
    engine, db, store, pool, clock = make_engine(lease_ttl=30.0)
    pool.dispatch(job(1))
    pool.take_outcomes()
    return engine, db, store, pool, clock


def test_leases_are_renewed_every_third_of_a_lease_and_not_before():
    engine, _db, store, pool, clock = running_one()
    leases = engine.leases
    assert leases.next_renew == clock.now + 30.0 / RENEWALS_PER_LEASE
    leases.tick(leases.next_renew - 0.001, pool)
    assert "renew" not in store.names()
    clock.now = leases.next_renew
    leases.tick(clock.now, pool)
    assert ("renew", [1]) in store.calls
    assert leases.leases_renewed_at == clock.now


def test_a_lease_lost_stops_its_job_and_drops_it_from_what_waits():
    engine, _db, store, pool, _clock = running_one()
    engine.ledger.add_claimed([job(2)])
    store.fence = {1, 2}
    engine.leases.renew(pool)
    assert ("renew", [1, 2]) in store.calls  # running and waiting jobs alike
    assert sorted(pool.cancelled) == [1, 2] and 2 not in pool.jobs
    assert not engine.ledger.waiting_jobs()


def test_a_renewal_the_database_does_not_answer_leaves_the_fence_clock_running():
    engine, _db, store, pool, clock = running_one()
    before = engine.leases.leases_renewed_at
    clock.now += 5.0
    store.fail_next["renew"] = psycopg.OperationalError("server closed the connection")
    engine.leases.renew(pool)
    assert engine.leases.leases_renewed_at == before


def test_the_fence_is_due_a_margin_before_the_lease_ends_only_while_something_is_held():
    engine, _db, _store, pool, _clock = make_engine(lease_ttl=30.0)
    leases = engine.leases
    assert leases.fence_at(pool) is None  # nothing held: nothing to fence
    pool.dispatch(job(1))
    assert leases.fence_at(pool) == leases.leases_renewed_at + 30.0 - leases.fence_margin
    leases.check(leases.fence_at(pool) - 0.001, pool)
    assert not leases.fenced


def test_an_overdue_fence_interrupts_running_jobs_gives_back_waiting_ones_then_lifts():
    engine, db, _store, pool, clock = running_one()
    engine.ledger.add_claimed([job(2)])
    leases = engine.leases
    overdue = leases.fence_at(pool)
    leases.check(overdue, pool)
    assert leases.fenced and engine.fenced
    assert pool.notified == [(1, "fence")]
    assert [j.id for j in engine.outbox.pending.releases] == [2]
    assert leases.fence_at(pool) is None  # fenced: nothing more is due for the fence
    db.break_connection()
    leases.check(overdue + 0.1, pool)
    assert leases.fenced  # the database away: no renewal can have lifted it
    clock.now = overdue + 60.0  # past any reconnection backoff
    assert db.maybe_reconnect()
    leases.check(clock.now, pool)
    assert not leases.fenced  # nothing held any more, the database answers: lifted


def test_children_are_asked_back_their_queued_jobs_once_per_outage():
    engine, db, _store, _pool, _clock = make_engine(queues=("a", "b"))
    pool = CountingPool()
    db.break_connection()
    engine.leases.hold_back(pool)
    engine.leases.hold_back(pool)
    assert pool.taken_back == ["a", "b"]
    db.outages += 1  # the next outage
    engine.leases.hold_back(pool)
    assert pool.taken_back == ["a", "b", "a", "b"]


def test_a_reconnect_writes_renews_and_reconciles_then_leads_no_rescue_for_a_lease():
    engine, _db, store, pool, clock = running_one()
    engine.ledger.add_claimed([job(2)])
    engine.outbox.released([job(3)], clock.now)
    engine.leases.reconnected(clock.now, pool)
    names = store.names()
    assert names.index("release") < names.index("renew") < names.index("reconcile")
    assert ("reconcile", [1, 2]) in store.calls
    assert not engine.leases.may_lead(clock.now + 29.9)
    assert engine.leases.may_lead(clock.now + 30.0)


def test_an_operators_cancel_stops_the_job_and_drops_what_waits():
    engine, _db, _store, pool, _clock = running_one()
    engine.ledger.add_claimed([job(2)])
    engine.leases.cancelled({1, 2}, pool)
    assert sorted(pool.cancelled) == [1, 2]
    assert not engine.ledger.waiting_jobs()


def test_at_exit_what_a_lost_claim_left_under_our_name_goes_back():
    """A drain's write cut short drops both connections, the claim in flight with them:
    the server committed it, so its jobs are leased to us and never reached us. At exit
    they go back at once (attempt not counted) instead of waiting out their lease; what
    runs here, waits for a child, or has an outcome unwritten stays ours."""
    engine, _db, store, pool, clock = running_one()
    engine.ledger.add_claimed([job(2)])
    engine.outbox.released([job(3)], clock.now)
    engine.close(pool, clock.now)
    names = store.names()
    # Job 1 runs, job 2 waits; job 3's release was written first, so it is not ours.
    assert ("reconcile", [1, 2]) in store.calls
    assert names.index("release") < names.index("reconcile") < names.index("leave")


def test_at_exit_with_the_database_away_nothing_is_given_back():
    """Unwritten outcomes keep their jobs leased (they ran: they must not go back as
    never started), and with the database away there is nothing to ask anyway."""
    engine, db, store, pool, clock = running_one()
    db.break_connection()
    db.server_up = False
    engine.close(pool, clock.now)
    assert "reconcile" not in store.names()
