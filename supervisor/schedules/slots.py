"""Slot arithmetic: when a schedule fires, as UTC instants. Pure functions, no clock.

``every`` slots are multiples of the interval since the Unix epoch, computed in exact
integer arithmetic so that every supervisor lands on the same instants. Cron slots come
from cronsim, iterated in the schedule's timezone: it follows Debian cron across
daylight-saving changes (a 5-field job at a fixed time that falls in the skipped hour
runs once when the clock jumps; one in the repeated hour runs once, not twice). The
database's unique key is on the UTC instant, so whatever a parser did, one instant
fires once.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cronsim import CronSim

from shared.schedules import ScheduleSpec

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
SCAN_LIMIT = 10_000  # cron slots counted one by one before we stop counting


def next_slot(spec: ScheduleSpec, after: datetime) -> datetime | None:
    """The first slot strictly after ``after`` (an aware datetime), in UTC; None when
    the expression has no slot within cronsim's 50-year horizon."""
    if spec.every is not None:
        step = timedelta(seconds=spec.every)
        return EPOCH + ((after - EPOCH) // step + 1) * step
    for slot in _cron_iter(spec, after):
        return slot
    return None


def slots_between(spec: ScheduleSpec, after: datetime, upto: datetime,
                  keep: int) -> tuple[list[datetime], int]:
    """Slots in ``(after, upto]``: the latest ``keep`` of them in order, and how many
    there are in all (for cron, counted up to ``SCAN_LIMIT``)."""
    if upto <= after:
        return [], 0
    if spec.every is not None:
        step = timedelta(seconds=spec.every)
        first = (after - EPOCH) // step + 1
        last = (upto - EPOCH) // step
        total = max(0, last - first + 1)
        start = max(first, last - keep + 1)
        return [EPOCH + k * step for k in range(start, last + 1)], total
    kept: list[datetime] = []
    total = 0
    for slot in _cron_iter(spec, after):
        if slot > upto:
            break
        total += 1
        kept.append(slot)
        if len(kept) > keep:
            kept.pop(0)
        if total >= SCAN_LIMIT:
            latest = latest_slot(spec, upto)
            if latest is not None and latest > kept[-1]:
                kept = [*kept[1:], latest] if keep > 0 else []
            break
    return kept, total


def latest_slot(spec: ScheduleSpec, upto: datetime) -> datetime | None:
    """The last slot at or before ``upto``, in UTC."""
    if spec.every is not None:
        step = timedelta(seconds=spec.every)
        return EPOCH + ((upto - EPOCH) // step) * step
    assert spec.cron is not None  # a spec has either ``every`` or ``cron``
    local = upto.astimezone(spec.zone).replace(microsecond=0)
    # A start with microseconds makes cronsim's reverse walk include the start second.
    it = CronSim(spec.cron, local.replace(microsecond=1), reverse=True)
    for slot in it:
        slot = slot.astimezone(UTC)
        if slot <= upto:
            return slot
    return None


def _cron_iter(spec: ScheduleSpec, after: datetime):
    """Cron slots strictly after ``after``, in UTC and strictly increasing."""
    assert spec.cron is not None
    start = after.astimezone(spec.zone)
    last = after
    for slot in CronSim(spec.cron, start):
        slot = slot.astimezone(UTC)
        # cronsim walks local wall time; from inside a repeated (fall-back) hour it can
        # return an instant we are already past. Only forward instants count.
        if slot > last:
            last = slot
            yield slot
