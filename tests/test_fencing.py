"""Self-fencing, with the engine over fakes: a supervisor whose leases went unrenewed for
``lease_ttl - margin`` interrupts what it runs (uncharged), gives back what it holds
unstarted and starts nothing, before another supervisor may rescue its jobs; once a
renewal succeeds it goes on. The real-process tests are tests/test_run_hang.py and
tests/test_run_partition.py."""

from __future__ import annotations

from engine_fakes import make_engine

from shared.defaults import fence_margin


def running_two(**settings):
    engine, db, store, pool, clock = make_engine(**settings)
    store.add(n=4)
    engine.tick(clock.now, pool)
    db.claims.answer()
    engine.tick(clock.now, pool)
    assert pool.busy_count() == 2
    return engine, db, store, pool, clock


def run_down(engine, db, pool, clock, seconds: float) -> None:
    """Turn the loop as the arbiter would, for ``seconds``, with the database away."""
    end = clock.now + seconds
    while clock.now < end:
        engine.tick(clock.now, pool)
        clock.now = min(max(engine.next_deadline(clock.now, pool), clock.now + 0.001), end)
    engine.tick(clock.now, pool)


def test_the_margin_is_a_deadline_and_a_second_but_at_most_a_third_of_the_lease():
    assert fence_margin(30.0, 3.0) == 4.0
    assert fence_margin(6.0, 3.0) == 2.0


def test_unrenewed_leases_stop_every_running_job_before_they_expire():
    engine, db, _store, pool, clock = running_two(lease_ttl=30.0)
    start = clock.now
    db.break_connection()
    db.server_up = False
    run_down(engine, db, pool, clock, 25.9)
    assert pool.busy_count() == 2, "fenced before lease_ttl - margin"
    run_down(engine, db, pool, clock, 0.2)
    assert pool.busy_count() == 0, "still running past lease_ttl - margin"
    assert engine.fenced
    assert clock.now - start < 30.0
    # Nothing starts while fenced, even with idle children and jobs in hand.
    assert not engine.ledger.waiting_counts()
    # The interrupted attempts wait to be written; they are not failures.
    assert [f.id for f in engine.outbox.pending.interrupts] == [1, 2]
    assert not engine.outbox.pending.failures


def test_once_the_database_answers_the_interrupts_are_written_and_work_goes_on():
    engine, db, store, pool, clock = running_two(lease_ttl=30.0)
    db.break_connection()
    db.server_up = False
    run_down(engine, db, pool, clock, 27.0)
    assert engine.fenced
    db.server_up = True
    store.calls.clear()
    clock.now += 1.0
    engine.tick(clock.now, pool)
    assert ("interrupt", [1, 2]) in store.calls
    assert not engine.fenced
    clock.now += 0.1
    engine.tick(clock.now, pool)
    assert db.claims.sent, "it claims again once its leases are renewed"


def test_renewals_that_succeed_never_fence():
    engine, db, _store, pool, clock = running_two(lease_ttl=6.0)
    for _ in range(100):
        clock.now += 0.5
        engine.tick(clock.now, pool)
        if db.claims.sent:
            db.claims.answer()
    assert not engine.fenced and pool.busy_count() == 2
