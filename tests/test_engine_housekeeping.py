"""``engine.housekeeping.Housekeeping`` over fakes: maintenance rounds at their interval
(sooner when a child goes native), crashes handed to the breaker, and burst mode's end:
asked only once everything here settled, it polls if work is left and says which
unserved kinds wait (the first ``UNHANDLED_KINDS_SHOWN``) when none is."""

from __future__ import annotations

import logging

from engine_fakes import make_engine

from shared.defaults import PLANS_FRESH_EVERY
from shared.jobs import ClaimedJob
from supervisor.engine.housekeeping import BURST_CHECK_INTERVAL, UNHANDLED_KINDS_SHOWN
from supervisor.pool import ChildEvent


def job(job_id: int) -> ClaimedJob:
    return ClaimedJob(job_id, "k", "default", 1, 5, 0, None, "{}")


def test_a_round_beats_once_per_interval_and_sooner_when_a_child_goes_native():
    engine, _db, store, pool, clock = make_engine(maintenance_interval=5.0)
    house = engine.housekeeping
    house.run(clock.now, pool, may_lead=True)
    assert store.names() == ["beat", "lead"]
    assert house.maintenance.next_round in house.deadlines()
    clock.now += 1.0
    house.run(clock.now, pool, may_lead=True)
    assert store.names() == ["beat", "lead"]
    engine.reporter.record([ChildEvent(4242, 0, "native", "busy in native code")], clock.now)
    house.run(clock.now, pool, may_lead=False)
    assert store.names() == ["beat", "lead", "beat"]  # early, and leading nothing


def test_crashes_seen_go_to_the_breaker_once():
    engine, _db, _store, _pool, _clock = make_engine()
    engine.reporter.crashes.extend(["k", "k"])
    engine.housekeeping.count_crashes()
    assert engine.housekeeping.breaker.pending == ["k", "k"]
    assert not engine.reporter.crashes


def test_burst_mode_asks_nothing_while_a_job_runs_or_outside_burst_mode():
    engine, _db, store, pool, clock = make_engine(burst=True)
    pool.dispatch(job(1))
    assert engine.housekeeping.burst_check_at(pool) is None
    engine.housekeeping.check_burst(clock.now, pool)
    assert "has_due_work" not in store.names()
    plain, _db, store, pool, clock = make_engine()
    assert plain.housekeeping.burst_check_at(pool) is None
    plain.housekeeping.check_burst(clock.now, pool)
    assert "has_due_work" not in store.names() and not plain.burst_finished


def test_burst_mode_polls_while_work_is_left_and_finishes_once_none_is():
    engine, _db, store, pool, clock = make_engine(burst=True)
    house = engine.housekeeping
    store.add(n=1)
    assert house.burst_check_at(pool) == clock.now
    house.check_burst(clock.now, pool)
    assert "poll" in store.names() and not engine.burst_finished
    assert house.next_burst_check == clock.now + BURST_CHECK_INTERVAL
    store.available.clear()
    house.check_burst(clock.now + BURST_CHECK_INTERVAL / 2, pool)
    assert not engine.burst_finished  # between checks
    house.check_burst(clock.now + BURST_CHECK_INTERVAL, pool)
    assert engine.burst_finished


def test_the_burst_end_names_the_first_unserved_kinds_and_counts_the_rest(caplog):
    engine, _db, store, pool, clock = make_engine(burst=True)
    unserved = {f"kind{n:02}": 1 for n in range(UNHANDLED_KINDS_SHOWN + 2)}
    store.unhandled_waiting = lambda queues, kinds: unserved
    with caplog.at_level(logging.WARNING, logger="supervisor.engine"):
        engine.housekeeping.check_burst(clock.now, pool)
    [line] = [r.getMessage() for r in caplog.records if "do not" in r.getMessage()
              or "does not serve" in r.getMessage()]
    assert f"kind{UNHANDLED_KINDS_SHOWN - 1:02} (1)" in line
    assert f"kind{UNHANDLED_KINDS_SHOWN:02}" not in line and "and 2 more kinds" in line
    assert engine.burst_finished


def test_fresh_plans_are_asked_for_every_interval_on_both_connections():
    """A generic plan made while supervisor.jobs was small kept scanning it whole as it
    grew (supervisor.db.nonblocking); the parent has its statements planned again."""
    engine, db, store, pool, clock = make_engine()
    house = engine.housekeeping
    start = clock.now
    for at in (start, start + PLANS_FRESH_EVERY - 0.1):
        house.run(at, pool, may_lead=False)
    assert "discard_plans" not in store.names() and db.claims.discards == 0
    house.run(start + PLANS_FRESH_EVERY, pool, may_lead=False)
    assert store.names().count("discard_plans") == 1 and db.claims.discards == 1
    house.run(start + 1.5 * PLANS_FRESH_EVERY, pool, may_lead=False)
    assert db.claims.discards == 1
    house.run(start + 2 * PLANS_FRESH_EVERY, pool, may_lead=False)
    assert store.names().count("discard_plans") == 2 and db.claims.discards == 2
