"""Handlers for the schedule end-to-end tests (``--app schedules_handlers``): two
every-second schedules, one coalescing missed slots (the default), one replaying them."""

from workers import job


@job(every=1)
def sched_tick() -> None:
    """Fires each second; a gap without supervisors becomes one coalesced fire."""


@job(every=1, catch_up=True)
def sched_replay() -> None:
    """Fires each second; slots missed while no supervisor ran are replayed."""
