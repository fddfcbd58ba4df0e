"""Schedules against a real PostgreSQL, without supervisor processes: the round, the
unique key, coalescing after a gap, pause/resume, run now, orphans, overlap."""

from __future__ import annotations

import math
import threading
import time
from datetime import timedelta
from itertools import pairwise

import psycopg
import pytest
from e2e import wait_until
from psycopg import errors

from shared.schedules import make_spec
from supervisor.schedules import Schedules, admin, store
from supervisor.schedules.firing import Fire, commit_fires, fire_schedule

pytestmark = pytest.mark.slow  # many databases: CI lane


def fires(conn, name=None):
    sql = ("SELECT schedule, slot, job_id, outcome, coalesced FROM supervisor.schedule_fires"
           + (" WHERE schedule = %s" if name else "") + " ORDER BY schedule, slot")
    return conn.execute(sql, (name,) if name else ()).fetchall()


def job_count(conn, kind):
    return conn.execute("SELECT count(*) FROM supervisor.jobs WHERE kind = %s",
                        (kind,)).fetchone()[0]


def set_mark(conn, name, seconds_ago):
    conn.execute("UPDATE supervisor.schedules SET done_until = now() - %s * interval '1 s'"
                 " WHERE name = %s", (seconds_ago, name))


def declare_with_mark(conn, spec, seconds_ago):
    """Declare ``spec`` as a supervisor would, its mark ``seconds_ago`` in the past: as if
    no supervisor had run since. (Moving the mark back after a round would make the
    round fire slots already fired: the unique key rightly refuses those.)"""
    store.sync(conn, [spec])
    set_mark(conn, spec.name, seconds_ago)


def rounds_until(schedules, conn, predicate, timeout=5.0):
    """Run rounds as the loop would, until ``predicate()`` holds (slots come each second)."""
    def step():
        schedules.fire_due(conn)
        return predicate()
    wait_until(step, timeout=timeout, interval=0.05, what="a schedule round to fire")


def test_first_round_declares_and_fires_nothing_from_before_it(conn):
    spec = make_spec("tick", "tick", every=1, args={"n": 1}, queue="q1")
    Schedules([spec], "sv-a").fire_due(conn)
    row = conn.execute("SELECT kind, queue, args, every, cron FROM supervisor.schedules"
                       " WHERE name = 'tick'").fetchone()
    assert row == ("tick", "q1", {"n": 1}, 1, None)
    assert job_count(conn, "tick") <= 1  # at most the slot of this very second


def test_a_due_slot_becomes_one_job_with_run_at_the_slot(conn):
    spec = make_spec("tick", "tick", every=1, args={"n": 1}, queue="q1", priority=3)
    schedules = Schedules([spec], "sv-a")
    rounds_until(schedules, conn, lambda: job_count(conn, "tick") >= 2)
    rows = conn.execute(
        "SELECT j.kind, j.queue, j.args, j.priority, j.state, j.run_at = f.slot"
        " FROM supervisor.schedule_fires f JOIN supervisor.jobs j ON j.id = f.job_id").fetchall()
    assert rows and all(r == ("tick", "q1", {"n": 1}, 3, "available", True) for r in rows)
    assert schedules.next_due() is not None


def test_a_gap_gives_one_coalesced_fire_and_every_slot_is_accounted_for(conn):
    spec = make_spec("tick", "tick", every=1)
    declare_with_mark(conn, spec, 30)
    before = conn.execute("SELECT done_until FROM supervisor.schedules").fetchone()[0]
    Schedules([spec], "sv-a").fire_due(conn)
    rows = fires(conn, "tick")
    assert sum(1 for r in rows if r[4] > 1) == 1  # one coalesced fire
    last = rows[-1][1]
    expected = int(last.timestamp()) - math.floor(before.timestamp())
    assert sum(r[4] for r in rows if r[1] > before) == expected  # no slot lost or doubled
    assert job_count(conn, "tick") == len(rows)


def test_catch_up_replays_each_missed_slot(conn):
    spec = make_spec("tick", "tick", every=1, catch_up=True)
    declare_with_mark(conn, spec, 20)
    Schedules([spec], "sv-a").fire_due(conn)
    rows = fires(conn, "tick")
    assert len(rows) >= 20 and all(r[4] == 1 for r in rows)
    gaps = {b[1] - a[1] for a, b in pairwise(rows)}
    assert gaps == {timedelta(seconds=1)}


def test_the_unique_key_refuses_a_slot_fired_twice_and_rolls_its_job_back(conn, dsn):
    # Bypass the row lock on purpose: the database alone must keep the slot single.
    spec = make_spec("tick", "tick", every=1)
    Schedules([spec], "sv-a").fire_due(conn)
    slot = conn.execute("SELECT date_trunc('second', now()) + interval '1 day'").fetchone()[0]
    with conn.transaction():
        assert commit_fires(conn, spec, "sv-a", [Fire(slot)]) == 1
    before = job_count(conn, "tick")
    with (psycopg.connect(dsn, autocommit=True) as other,
          pytest.raises(errors.UniqueViolation), other.transaction()):
        commit_fires(other, spec, "sv-b", [Fire(slot)])
    assert job_count(conn, "tick") == before
    assert [r[3] for r in fires(conn, "tick") if r[1] == slot] == ["fired"]


def test_racing_supervisors_fire_each_slot_once(dsn, conn):
    spec = make_spec("tick", "tick", every=1, catch_up=True)
    declare_with_mark(conn, spec, 50)
    barrier = threading.Barrier(3)
    results: list[int] = []

    def racer(owner):
        with psycopg.connect(dsn, autocommit=True) as c:
            barrier.wait()
            results.append(fire_schedule(c, spec, owner).jobs)

    threads = [threading.Thread(target=racer, args=(f"sv-{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rows = fires(conn, "tick")
    assert sum(results) == len(rows) == job_count(conn, "tick") >= 50
    assert len({r[1] for r in rows}) == len(rows)


def test_pause_stops_firing_and_resume_does_not_replay_the_pause(conn):
    spec = make_spec("tick", "tick", every=1)
    schedules = Schedules([spec], "sv-a")
    schedules.fire_due(conn)
    assert admin.pause(conn, "tick") is False
    assert admin.pause(conn, "tick") is True
    set_mark(conn, "tick", 10)
    count = job_count(conn, "tick")
    schedules.fire_due(conn)
    assert job_count(conn, "tick") == count
    assert [r["status"] for r in admin.list_schedules(conn)] == ["paused"]
    assert admin.resume(conn, "tick") is True
    schedules.fire_due(conn)
    assert job_count(conn, "tick") <= count + 1  # the current slot at most, no backlog
    assert all(r[4] == 1 for r in fires(conn, "tick"))


def test_run_now_enqueues_the_stored_job_without_moving_the_mark(conn):
    spec = make_spec("report", "report", cron="0 3 * * *", timezone="Europe/Berlin",
                     args={"day": "today"}, queue="reports")
    Schedules([spec], "sv-a").fire_due(conn)
    mark = conn.execute("SELECT done_until FROM supervisor.schedules").fetchone()[0]
    job_id = admin.run_now(conn, "report")
    job = conn.execute("SELECT kind, queue, args, state FROM supervisor.jobs WHERE id = %s",
                       (job_id,)).fetchone()
    assert job == ("report", "reports", {"day": "today"}, "available")
    assert [r[3] for r in fires(conn, "report")] == ["manual"]
    assert conn.execute("SELECT done_until FROM supervisor.schedules").fetchone()[0] == mark
    listed = admin.list_schedules(conn)[0]
    assert listed["last_job_id"] == job_id and listed["last_state"] == "available"
    assert listed["next_fire"].astimezone(spec.zone).hour == 3
    assert admin.upcoming(conn) == [{"name": "report", "next_fire": listed["next_fire"],
                                     "expression": "0 3 * * *"}]
    with pytest.raises(admin.UnknownSchedule):
        admin.run_now(conn, "nope")


def test_a_schedule_removed_from_code_is_kept_as_orphaned_and_not_fired(conn):
    old = make_spec("gone", "gone", every=1)
    Schedules([old], "sv-old").fire_due(conn)
    conn.execute("UPDATE supervisor.schedules SET seen_at = now() - interval '1 hour',"
                 " done_until = now() - interval '10 s'")
    Schedules([make_spec("tick", "tick", every=1)], "sv-new").fire_due(conn)
    statuses = {r["name"]: r["status"] for r in admin.list_schedules(conn)}
    assert statuses == {"gone": "orphaned", "tick": "active"}
    assert job_count(conn, "gone") == 0


@pytest.mark.slow
def test_no_overlap_skips_while_the_previous_job_is_live(conn):
    spec = make_spec("slow", "slow", every=1, overlap=False)
    schedules = Schedules([spec], "sv-a")
    rounds_until(schedules, conn, lambda: job_count(conn, "slow") == 1)
    # The job stays available (nobody runs it): the next slots are skipped.
    rounds_until(schedules, conn, lambda: [r[3] for r in fires(conn, "slow")][-2:]
                 == ["skipped", "skipped"])
    assert job_count(conn, "slow") == 1
    conn.execute("UPDATE supervisor.jobs SET state = 'completed', finished_at = now()")
    rounds_until(schedules, conn, lambda: job_count(conn, "slow") == 2)


def test_a_failed_round_is_retried_soon(conn):
    spec = make_spec("tick", "tick", every=3600)
    clock = [100.0]
    schedules = Schedules([spec], "sv-a", clock=lambda: clock[0])
    conn.execute("DROP TABLE supervisor.schedule_fires, supervisor.schedules")
    with pytest.raises(psycopg.errors.UndefinedTable):
        schedules.fire_due(conn)
    assert schedules.next_due() == pytest.approx(101.0)


def test_a_host_clock_an_hour_off_neither_fires_early_nor_sleeps_an_hour(conn):
    spec = make_spec("tick", "tick", every=1)
    for skew in (3600.0, -3600.0):
        schedules = Schedules([spec], f"sv-{skew}", wall=lambda s=skew: time.time() + s)
        schedules.fire_due(conn)
        assert -0.5 <= schedules.next_due() - time.monotonic() <= 1.1
    late = conn.execute("SELECT count(*) FROM supervisor.schedule_fires"
                        " WHERE slot > now()").fetchone()[0]
    assert late == 0
