"""Schedules under real ``supervisor run`` processes: an every-second schedule fires once
per slot under two and three supervisors, a SIGKILL of the one that fired last loses no
slot, a gap with no supervisor is coalesced (or replayed with catch_up)."""

from __future__ import annotations

import signal
from datetime import datetime, timedelta
from itertools import pairwise

import psycopg
import pytest
from e2e import Supervisor, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
APP = "schedules_handlers"
SECOND = timedelta(seconds=1)


def fires(dsn: str, name: str) -> list[tuple[datetime, int | None, int, str]]:
    """(slot, job_id, coalesced, fired_by) of every fire of ``name``, oldest first."""
    with psycopg.connect(dsn, autocommit=True) as c:
        return c.execute("SELECT slot, job_id, coalesced, fired_by FROM supervisor.schedule_fires"
                         " WHERE schedule = %s ORDER BY slot", (name,)).fetchall()


def start(dsn: str, count: int) -> list[Supervisor]:
    return [Supervisor(dsn, "-n", "1", app=APP) for _ in range(count)]


def stop(supervisors: list[Supervisor]) -> None:
    for sv in supervisors:
        if sv.proc.poll() is None:
            sv.signal(signal.SIGTERM)
    for sv in supervisors:
        if sv.proc.poll() is None or sv.proc.returncode is None:
            sv.wait(30)


def assert_once_per_slot(dsn: str, name: str) -> list[tuple]:
    """Every slot from the first fire to the last fired exactly once, none coalesced, and
    each fire is one job whose run_at is its slot."""
    rows = fires(dsn, name)
    slots = [r[0] for r in rows]
    assert all(b - a == SECOND for a, b in pairwise(slots)), f"gap or double in {slots}"
    assert [r[2] for r in rows] == [1] * len(rows), "a slot was coalesced while alive"
    with psycopg.connect(dsn, autocommit=True) as c:
        jobs = c.execute("SELECT id, run_at FROM supervisor.jobs WHERE kind = %s ORDER BY id",
                         (name,)).fetchall()
    assert sorted((j[0], j[1]) for j in jobs) == sorted((r[1], r[0]) for r in rows)
    return rows


@pytest.mark.parametrize("count", [2, 3])
def test_every_second_schedule_fires_once_per_slot_under_several_supervisors(dsn, count):
    supervisors = start(dsn, count)
    try:
        wait_until(lambda: len(fires(dsn, "sched_tick")) >= 6, timeout=40,
                   what="six fires")
    finally:
        stop(supervisors)
    rows = assert_once_per_slot(dsn, "sched_tick")
    assert_once_per_slot(dsn, "sched_replay")
    assert len({r[3] for r in rows}) >= 1


def test_killing_the_supervisor_that_fired_last_loses_no_slot(dsn):
    supervisors = start(dsn, 2)
    try:
        wait_until(lambda: len(fires(dsn, "sched_tick")) >= 3, timeout=40, what="three fires")
        last_owner = fires(dsn, "sched_tick")[-1][3]
        pid = int(last_owner.split(":")[1])
        victim = next(sv for sv in supervisors if sv.pid == pid)
        victim.signal(signal.SIGKILL)
        victim.wait(10)
        killed_at = len(fires(dsn, "sched_tick"))
        wait_until(lambda: len(fires(dsn, "sched_tick")) >= killed_at + 4, timeout=20,
                   what="four fires after the kill")
    finally:
        stop(supervisors)
    rows = assert_once_per_slot(dsn, "sched_tick")
    assert any(r[3] != last_owner for r in rows[killed_at:])


def test_a_gap_without_supervisor_is_coalesced_or_replayed(dsn):
    first = start(dsn, 1)
    try:
        wait_until(lambda: len(fires(dsn, "sched_tick")) >= 2, timeout=40, what="two fires")
    finally:
        stop(first)
    last_before = fires(dsn, "sched_tick")[-1][0]
    replay_before = fires(dsn, "sched_replay")[-1][0]
    with psycopg.connect(dsn, autocommit=True) as c:
        # The gap is the scenario: wait until the database's clock is 8 s past the last fire.
        wait_until(lambda: c.execute("SELECT now() >= %s + interval '8 s'",
                                     (max(last_before, replay_before),)).fetchone()[0],
                   timeout=20, interval=0.1, what="an 8 s gap")
    second = start(dsn, 1)
    try:
        wait_until(lambda: fires(dsn, "sched_tick")[-1][0] >= last_before + 8 * SECOND,
                   timeout=40, what="fires after the gap")
    finally:
        stop(second)
    tick = [r for r in fires(dsn, "sched_tick") if r[0] > last_before]
    coalesced = [r for r in tick if r[2] > 1]
    assert len(coalesced) == 1, tick  # the missed slots became one fire
    assert coalesced[0][2] >= 8  # the whole gap: the slots inside the grace are part of it
    assert tick[0] == coalesced[0]
    with psycopg.connect(dsn, autocommit=True) as c:
        # One job at the moment the gap ends, not one plus each slot inside the grace.
        at_once = c.execute("SELECT count(*) FROM supervisor.schedule_fires f"
                            " WHERE schedule = 'sched_tick' AND fired_at ="
                            " (SELECT fired_at FROM supervisor.schedule_fires"
                            "  WHERE schedule = 'sched_tick' AND slot = %s)",
                            (coalesced[0][0],)).fetchone()[0]
    assert at_once == 1
    span = int((tick[-1][0] - last_before) / SECOND)
    assert sum(r[2] for r in tick) == span  # every slot accounted for exactly once
    replay = [r for r in fires(dsn, "sched_replay") if r[0] > replay_before]
    assert [r[2] for r in replay] == [1] * len(replay)  # replayed one by one
    assert all(b[0] - a[0] == SECOND for a, b in pairwise([(replay_before,), *replay]))
    assert len(replay) >= 5


def test_postgres_restart_mid_run_keeps_every_slot_accounted_for(throwaway_server):
    from shared.migrate import migrate

    dsn = throwaway_server.dsn
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrate(conn)
    supervisors = start(dsn, 2)
    try:
        wait_until(lambda: len(fires(dsn, "sched_tick")) >= 3, timeout=40, what="three fires")
        throwaway_server.restart()

        def fired_after_restart():
            try:
                return len(fires(dsn, "sched_tick")) >= 8
            except psycopg.OperationalError:
                return False

        wait_until(fired_after_restart, timeout=60, what="fires after the restart")
    finally:
        stop(supervisors)
    for name in ("sched_tick", "sched_replay"):
        rows = fires(dsn, name)
        # Outage slots may be coalesced (sched_tick) or replayed (sched_replay); none is
        # lost or fired twice.
        for a, b in pairwise(rows):
            assert int((b[0] - a[0]) / SECOND) == b[2], (name, a, b)
        if name == "sched_replay":
            assert all(r[2] == 1 for r in rows)


def test_a_schedule_from_the_config_file_fires_with_its_args(dsn, tmp_path):
    config = tmp_path / "supervisor.toml"
    config.write_text('[schedules.from_file]\nkind = "sched_config_target"\nevery = 1\n'
                      'args = {n = 7}\n')
    sv = Supervisor(dsn, "-n", "1", "--config", str(config), app=APP)
    try:
        wait_until(lambda: len(fires(dsn, "from_file")) >= 2, timeout=30, what="two fires")
    finally:
        stop([sv])
    with psycopg.connect(dsn, autocommit=True) as c:
        rows = c.execute("SELECT queue, args FROM supervisor.jobs "
                         "WHERE kind = 'sched_config_target'").fetchall()
    assert rows and {(q, a["n"]) for q, a in rows} == {("from_config", 7)}


def test_burst_fires_no_schedules(dsn):
    from shared.enqueue import enqueue

    with psycopg.connect(dsn, autocommit=True) as c:
        enqueue("sched_sleep", {"seconds": 3.0}, conn=c)  # three slots of sched_tick pass
    sv = Supervisor(dsn, "-n", "1", "--burst", app=APP)
    assert sv.wait(30) == 0, sv.err
    assert fires(dsn, "sched_tick") == []
