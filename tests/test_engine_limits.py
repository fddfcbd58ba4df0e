"""A global max_running slice, as the engine renews it, against fakes: the slots it keeps
must cover every job handed to a child, started or not, since dispatch counts those too
(issue 24: 5 ran against a limit of 4 right after start-up and across drains, when a
renewal fell between a job's dispatch and its START)."""

from __future__ import annotations

import pytest
from engine_fakes import FakePool, make_engine

from shared.defaults import SETTINGS_FALLBACK
from supervisor.db import LeaseRow, StoredLimits
from supervisor.engine.leases import running_slice
from supervisor.engine.limits import LOOK_SLACK


class StartLaterPool(FakePool):
    """Children whose START is still on its way back when the engine next looks."""

    def dispatch(self, job, depth=1, *, own_queue=False):
        taken = super().dispatch(job, depth, own_queue=own_queue)
        if taken:
            self.outcomes.pop()  # the JobStarted the fake would report at once
        return taken


def test_a_renewal_keeps_the_slots_of_jobs_whose_start_has_not_come_back():
    engine, db, store, _pool, clock = make_engine(children=2)
    pool = StartLaterPool(2)
    store.read_limits = lambda queues: {"default": StoredLimits(max_running=2)}
    others: dict[str, LeaseRow] = {}  # alone at first: both slots are this one's
    kept: list[int] = []

    def renew_lease(queue, decide, to_row):
        decided = decide(others)
        kept.append(decided[0])
        return decided

    store.renew_lease = renew_lease
    store.add(n=2)
    engine.planner.wake(["default"])
    engine.tick(clock.now, pool)  # the first renewal grants both slots
    clock.now += 0.01
    engine.tick(clock.now, pool)
    db.claims.answer()
    clock.now += 0.01
    engine.tick(clock.now, pool)
    assert len(pool.jobs) == 2 and not engine.ledger.running["default"]
    # Another supervisor now wants both slots: a fair split would leave this one 1.
    others["other"] = LeaseRow(slots=0, want_slots=2, rate=0.0, want_rate=0.0)
    clock.now += 1.0  # the next renewal is due; both STARTs are still on their way
    engine.tick(clock.now, pool)
    assert kept[-1] == 2, kept
    # What the arithmetic would store had it been told nothing runs here.
    assert running_slice(2, "me", 2, 0, others)[0] == 1


def _busy_with_nothing_else_due(limits_read, listen=True):
    """Two children running, the first limits look done, no poll or write due soon.
    ``listen``: whether the database's LISTEN works (the limits' changes are told)."""
    engine, db, store, pool, clock = make_engine(children=2)
    db.listen = listen
    reads: list[float] = []

    def read_limits(queues):
        reads.append(clock.now)
        return limits_read

    store.read_limits = read_limits
    store.renew_lease = lambda queue, decide, to_row: decide({})
    store.add(n=2)
    engine.planner.wake(["default"])
    engine.tick(clock.now, pool)
    clock.now += 0.01
    engine.tick(clock.now, pool)
    db.claims.answer()
    engine.tick(clock.now, pool)
    assert pool.busy_count() == 2
    clock.now += 0.6  # the look of 0.5 s is due: done now
    engine.tick(clock.now, pool)
    engine.poller.next_poll = clock.now + 5.0
    engine.outbox.take_starts(clock.now, every=True)
    return engine, pool, clock, reads


def test_without_a_global_limit_and_without_listen_the_look_wakes_no_loop_of_its_own():
    """Issue 43: with no limit on the served queues the look for one rode a timer wake
    of its own every 0.5 s (24 of the 4.5 wakes per 100 ms job counted then). Without
    LISTEN (behind a pooler) it asks the loop to wake only ``LOOK_SLACK`` later, and a
    wake for anything else once it is due does it: a limit newly set still arrives
    within a second."""
    engine, pool, clock, reads = _busy_with_nothing_else_due({}, listen=False)
    limits = engine.planner.limits
    assert limits.next_refresh <= clock.now + limits.interval
    assert engine.next_deadline(clock.now, pool) == limits.next_refresh + LOOK_SLACK
    looked = len(reads)
    clock.now = limits.next_refresh + 0.01  # a child's answer wakes the loop
    engine.tick(clock.now, pool)
    assert len(reads) == looked + 1


def test_without_a_global_limit_a_listening_supervisor_looks_when_told():
    """Issue 43: a supervisor that hears the settings channel (schema 0031's trigger on
    queue_limits) reads the limits when a NOTIFY says they changed, and otherwise only
    every ``SETTINGS_FALLBACK``: a second's look at an empty table was one of an idle
    supervisor's five statements a second."""
    engine, pool, clock, reads = _busy_with_nothing_else_due({})
    limits = engine.planner.limits
    looked = len(reads)
    assert limits.next_refresh >= clock.now + SETTINGS_FALLBACK - 1.0
    clock.now += 3.0  # three seconds of wakes for other things: no look
    engine.poller.next_poll = clock.now + 5.0
    engine.tick(clock.now, pool)
    assert len(reads) == looked
    engine.db.settings_changed.add("queue_limits")  # `supervisor queues limit` ran
    clock.now += 0.01
    engine.tick(clock.now, pool)  # the tick that heard it reads them
    assert len(reads) == looked + 1
    assert limits.next_refresh == pytest.approx(clock.now + SETTINGS_FALLBACK)


def test_with_a_global_limit_the_slice_is_renewed_on_time():
    """A limit kept here: its slice's renewal wakes the loop when due, as before."""
    engine, pool, clock, _reads = _busy_with_nothing_else_due(
        {"default": StoredLimits(max_running=4)})
    limits = engine.planner.limits
    assert engine.next_deadline(clock.now, pool) == limits.next_refresh
