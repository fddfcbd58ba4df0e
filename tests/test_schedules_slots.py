"""Schedules, pure logic: slot arithmetic (daylight saving included), the firing plan
(coalescing, catch-up, overlap), and validation of definitions. No database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest

from shared.schedules import ScheduleError, make_spec
from supervisor.schedules import merge_specs, parse_config_schedules, specs_from_registry
from supervisor.schedules.firing import CATCH_UP_LIMIT, plan
from supervisor.schedules.slots import latest_slot, next_slot, slots_between
from workers.registry import REGISTRY, job

BERLIN = "Europe/Berlin"


def at(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def fire_with_fake_clock(spec, start: datetime, end: datetime, step: timedelta):
    """Drive ``plan`` as the supervisor's rounds would, with a clock that jumps by
    ``step``; returns every fire in order."""
    done, now, fires = start, start, []
    while now < end:
        now += step
        planned = plan(spec, done, now)
        fires.extend(planned)
        if planned:
            done = planned[-1].slot
    return fires


# -- daylight saving -----------------------------------------------------------------------
@pytest.mark.parametrize("step_minutes", [3, 7, 60])
@pytest.mark.parametrize("days", [(2026, 3, 27), (2026, 10, 23)])  # spring / autumn change
def test_each_local_0300_fires_once_across_a_dst_change(step_minutes, days):
    spec = make_spec("nightly", "nightly", cron="0 3 * * *", timezone=BERLIN)
    start = at(*days)
    fires = fire_with_fake_clock(spec, start, start + timedelta(days=4),
                                 timedelta(minutes=step_minutes))
    local = [f.slot.astimezone(spec.zone) for f in fires]
    assert [(t.hour, t.minute) for t in local] == [(3, 0)] * 4
    assert len({t.date() for t in local}) == 4  # one per local day, none twice
    assert all(f.coalesced == 1 for f in fires)


def test_dst_offsets_are_those_of_the_day():
    spec = make_spec("nightly", "nightly", cron="0 3 * * *", timezone=BERLIN)
    assert next_slot(spec, at(2026, 3, 28, 12)) == at(2026, 3, 29, 1)   # CEST: UTC+2
    assert next_slot(spec, at(2026, 10, 24, 12)) == at(2026, 10, 25, 2)  # CET: UTC+1


def test_a_time_in_the_skipped_or_repeated_hour_fires_once():
    # 02:30 does not exist on 29 March (Debian cron runs it when the clock jumps, 03:00)
    # and exists twice on 25 October (it runs the first time only).
    spec = make_spec("half", "half", cron="30 2 * * *", timezone=BERLIN)
    spring, _ = slots_between(spec, at(2026, 3, 28), at(2026, 3, 31), 10)
    assert [s.astimezone(spec.zone).strftime("%d %H:%M %Z") for s in spring] == [
        "28 02:30 CET", "29 03:00 CEST", "30 02:30 CEST"]
    autumn, _ = slots_between(spec, at(2026, 10, 24), at(2026, 10, 27), 10)
    assert [s.astimezone(spec.zone).strftime("%d %H:%M %Z") for s in autumn] == [
        "24 02:30 CEST", "25 02:30 CEST", "26 02:30 CET"]
    # Resuming from inside the repeated hour (02:15 CET, after 02:30 CEST fired) does
    # not go back to the instant already passed.
    assert next_slot(spec, at(2026, 10, 25, 1, 15)) == at(2026, 10, 26, 1, 30)


def test_hourly_schedule_in_a_dst_zone_counts_real_hours():
    spec = make_spec("hourly", "hourly", cron="0 * * * *", timezone=BERLIN)
    slots, total = slots_between(spec, at(2026, 10, 24, 22), at(2026, 10, 25, 4), 100)
    assert total == 6 and len(set(slots)) == 6
    assert all(b - a == timedelta(hours=1) for a, b in pairwise(slots))


# -- slots ---------------------------------------------------------------------------------
def test_every_slots_are_epoch_multiples_strictly_after():
    spec = make_spec("feed", "feed", every=30)
    assert next_slot(spec, at(2026, 1, 1, 0, 0, 0)) == at(2026, 1, 1, 0, 0, 30)
    assert next_slot(spec, at(2026, 1, 1, 0, 0, 29)) == at(2026, 1, 1, 0, 0, 30)
    slots, total = slots_between(spec, at(2026, 1, 1), at(2026, 1, 1, 1), 2)
    assert total == 120 and slots == [at(2026, 1, 1, 0, 59, 30), at(2026, 1, 1, 1)]
    assert latest_slot(spec, at(2026, 1, 1, 0, 0, 59)) == at(2026, 1, 1, 0, 0, 30)


def test_six_fields_put_seconds_first():
    spec = make_spec("s", "s", cron="*/15 * * * * *")
    slots, total = slots_between(spec, at(2026, 1, 1), at(2026, 1, 1, 0, 1), 10)
    assert total == 4 and [s.second for s in slots] == [15, 30, 45, 0]


def test_cron_count_stops_at_the_scan_limit_but_keeps_the_latest_slot():
    spec = make_spec("s", "s", cron="* * * * * *")
    slots, total = slots_between(spec, at(2026, 1, 1), at(2026, 1, 2), 1)
    assert total == 10_000 and slots == [at(2026, 1, 2)]


# -- the plan --------------------------------------------------------------------------------
def test_a_gap_is_coalesced_into_one_fire_at_the_newest_due_slot():
    # The slots still inside the grace (6 and 7) used to fire beside the coalesced one:
    # three jobs at once for a user who asked for one.
    spec = make_spec("tick", "tick", every=1)
    fires = plan(spec, at(2026, 1, 1), at(2026, 1, 1, 0, 0, 7, 500_000), grace=2.0)
    assert [(f.slot.second, f.coalesced) for f in fires] == [(7, 7)]
    cron = make_spec("tick", "tick", cron="* * * * * *")
    fires = plan(cron, at(2026, 1, 1), at(2026, 1, 1, 0, 0, 8), grace=2.0)
    assert [(f.slot.second, f.coalesced) for f in fires] == [(8, 8)]


def test_on_time_slots_without_a_gap_still_fire_alone():
    spec = make_spec("tick", "tick", every=1)
    fires = plan(spec, at(2026, 1, 1, 0, 0, 5), at(2026, 1, 1, 0, 0, 6, 900_000), grace=2.0)
    assert [(f.slot.second, f.coalesced) for f in fires] == [(6, 1)]
    fires = plan(spec, at(2026, 1, 1, 0, 0, 5), at(2026, 1, 1, 0, 0, 7, 500_000), grace=2.0)
    assert [(f.slot.second, f.coalesced) for f in fires] == [(6, 1), (7, 1)]


def test_catch_up_replays_each_missed_slot_up_to_the_cap():
    spec = make_spec("tick", "tick", every=1, catch_up=True)
    fires = plan(spec, at(2026, 1, 1), at(2026, 1, 1, 0, 0, 7), grace=0.5)
    assert [f.coalesced for f in fires] == [1] * 7
    many = plan(spec, at(2026, 1, 1), at(2026, 1, 1, 1), grace=0.0)
    assert len(many) == CATCH_UP_LIMIT
    assert sum(f.coalesced for f in many) == 3600  # the oldest folded into the first


def test_nothing_due_plans_nothing():
    spec = make_spec("tick", "tick", every=10)
    assert plan(spec, at(2026, 1, 1), at(2026, 1, 1, 0, 0, 9)) == []


def test_no_overlap_fires_one_job_and_none_while_the_last_one_lives():
    spec = make_spec("tick", "tick", every=1, catch_up=True, overlap=False)
    fires = plan(spec, at(2026, 1, 1), at(2026, 1, 1, 0, 0, 3), grace=0.0)
    assert [f.run for f in fires] == [True, False, False]
    fires = plan(spec, at(2026, 1, 1), at(2026, 1, 1, 0, 0, 3), grace=0.0, previous_live=True)
    assert [f.run for f in fires] == [False, False, False]


# -- definitions -----------------------------------------------------------------------------
@pytest.mark.parametrize("options, message", [
    ({"cron": "0 3 * *"}, "need 5 fields"),
    ({"cron": "61 * * * *"}, "Bad minute"),
    ({"cron": "0 0 30 2 *"}, "invalid cron expression"),
    ({"cron": "0 3 * * *", "timezone": "Mars/Olympus"}, "unknown timezone 'Mars/Olympus'"),
    ({"cron": "0 3 * * *", "timezone": "../etc/passwd"}, "unknown timezone"),
    ({"every": 0}, "at least 1"),
    ({"every": 1.5}, "whole number"),
    ({"every": "30"}, "number of seconds"),
    ({"every": float("inf")}, "whole number"),
    ({"every": 30, "timezone": BERLIN}, "cron schedules only"),
    ({}, "exactly one of cron or every"),
    ({"cron": "* * * * *", "every": 5}, "exactly one of cron or every"),
])
def test_bad_definitions_are_one_line_errors_naming_the_schedule(options, message):
    with pytest.raises(ScheduleError) as err:
        make_spec("nightly", "nightly", **options)
    text = str(err.value)
    assert text.startswith("schedule 'nightly': ") and message in text and "\n" not in text


def test_job_decorator_records_the_schedule_and_rejects_bad_ones_at_import():
    try:
        @job(name="sched_test_ok", queue="reports", cron="0 3 * * *", timezone=BERLIN)
        def nightly() -> None: ...

        assert nightly.schedule.cron == "0 3 * * *" and nightly.schedule.queue == "reports"
        assert [s.name for s in specs_from_registry(REGISTRY.values())
                if s.name == "sched_test_ok"] == ["sched_test_ok"]
        with pytest.raises(ScheduleError, match="schedule 'sched_test_bad': unknown timezone"):
            @job(name="sched_test_bad", every=5, timezone="Nowhere/Land")
            def bad() -> None: ...
        assert "sched_test_bad" not in REGISTRY
        with pytest.raises(ScheduleError, match="schedule 'sched_test_args': the handler needs"):
            @job(name="sched_test_args", every=5)
            def needs(path: str) -> None: ...
    finally:
        REGISTRY.pop("sched_test_ok", None)


def test_config_tables_parse_and_fail_in_one_line():
    specs = parse_config_schedules({
        "nightly-report": {"kind": "report", "cron": "0 3 * * *", "timezone": BERLIN,
                           "args": {"day": "yesterday"}, "queue": "reports"},
        "poll": {"kind": "poll_feed", "every": 30, "catch_up": True},
    })
    assert [(s.name, s.source, s.queue) for s in specs] == [
        ("nightly-report", "config", "reports"), ("poll", "config", "default")]
    for tables, message in [
        ({"x": {"cron": "* * * * *"}}, "schedule 'x': kind is required"),
        ({"x": {"kind": "k", "cron": "* * * * *", "crom": 1}}, "unknown key(s) crom"),
        ({"x": {"kind": "k", "every": 5, "args": [1]}}, "args must be a table"),
        ({"x": {"kind": "k", "every": 5, "overlap": "no"}}, "overlap must be true or false"),
        ({"x": "0 3 * * *"}, "schedule 'x': expected a table"),
    ]:
        with pytest.raises(ScheduleError, match=message.replace("(", r"\(").replace(")", r"\)")):
            parse_config_schedules(tables)


def test_one_name_defined_twice_is_an_error():
    a = make_spec("poll", "poll", every=30)
    b = make_spec("poll", "poll", every=60, source="config")
    assert merge_specs([a], [a]) == [a]
    with pytest.raises(ScheduleError, match="defined twice"):
        merge_specs([a], [b])
