"""Handlers for the cost roll-up tests (``--app costs_handlers``): a member that spins a
known amount of its own CPU, and fails its first attempt when told, so a batch's
roll-up can be held against what its members did."""

from __future__ import annotations

import resource

from workers import current_job, job


def _cpu() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    return me.ru_utime + me.ru_stime


@job(queue="costs", max_attempts=3)
def costs_spin(seconds: float, fail_first: bool = False) -> float:
    start = _cpu()
    while _cpu() - start < seconds:
        pass
    if fail_first and current_job().attempt == 1:
        raise RuntimeError("first attempt fails on purpose")
    return _cpu() - start


@job(queue="costs")
def costs_done() -> None:
    return None
