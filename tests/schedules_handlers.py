"""Handlers for the schedule end-to-end tests (``--app schedules_handlers``): two
every-second schedules, one coalescing missed slots (the default), one replaying them."""

from workers import job


@job(every=1)
def sched_tick() -> None:
    """Fires each second; a gap without supervisors becomes one coalesced fire."""


@job(every=1, catch_up=True)
def sched_replay() -> None:
    """Fires each second; slots missed while no supervisor ran are replayed."""


@job(queue="from_config")
def sched_config_target(n: int = 0) -> int:
    """Fired by a schedule declared in a config file, not by a decorator."""
    return n


@job
def sched_sleep(seconds: float) -> None:
    """Keeps a burst run busy for a while."""
    import time

    time.sleep(seconds)
