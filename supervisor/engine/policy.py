"""Where a claimed job's policy comes from: its own row, then its handler's ``@job``
settings, then the supervisor's config (DESIGN, "Settings: where a job's policy comes
from"). Resolved once, at claim, so the pool and the writes see final values."""

from __future__ import annotations

import logging

from shared.jobs import ClaimedJob, CrashRule
from shared.reservations import Reservation, reservation
from shared.units import format_size
from supervisor.admission import Budget
from supervisor.db import StoreSettings
from workers.registry import get_handler

log = logging.getLogger("supervisor.admission")


def resolve_timeout(job: ClaimedJob, configured: float | None) -> float | None:
    """The hard timeout of ``job``'s attempt in seconds (None: no limit; a 0 anywhere
    in the chain disables it)."""
    timeout = job.timeout
    if timeout is None:
        handle = get_handler(job.kind)
        if handle is not None:
            timeout = handle.defaults.timeout
    if timeout is None:
        timeout = configured
    return timeout or None


def resolve_heartbeat_timeout(job: ClaimedJob) -> float | None:
    """How long ``job``'s attempt may stay silent before it is judged: its handler's
    ``@job(heartbeat_timeout=...)`` (None: the pool's ``heartbeat_timeout``)."""
    handle = get_handler(job.kind)
    return handle.defaults.heartbeat_timeout if handle is not None else None


def handler_reservations(kinds: list[str]) -> dict[str, Reservation]:
    """Each loaded handler's ``@job(cpus=..., memory=..., resources=...)``: what a job of
    its kind reserves when its row leaves them out (enqueued by kind name, by SQL or the
    CLI), as it gets the handler's timeout."""
    found = {}
    for kind in kinds:
        handle = get_handler(kind)
        if handle is None:
            continue
        declared = reservation(handle.defaults.options)
        if declared.declared:
            found[kind] = declared
    return found


def fill_reservation(job: ClaimedJob, declared: Reservation | None) -> None:
    """Give ``job`` its handler's reservation (``declared``) where its row has none."""
    if declared is None:
        return
    if job.cpus is None:
        job.cpus = declared.cpus
    if job.memory is None:
        job.memory = declared.memory
    if job.resources is None and declared.resources:
        job.resources = dict(declared.resources)


def served_kinds(kinds: list[str], budget: Budget) -> list[str]:
    """``kinds`` less those whose handler declares more than this supervisor's whole
    ``budget`` (CPUs past ``-n``, memory past the budget, counted resources it lacks):
    their jobs could never start here and are left for a supervisor that can hold them;
    each left out is logged once."""
    served = []
    for kind, declared in ((k, handler_reservations([k]).get(k)) for k in kinds):
        why = None if declared is None else _beyond(declared, budget)
        if why is None:
            served.append(kind)
        else:
            log.warning("kind %s %s: not served here (its jobs wait for a supervisor "
                        "that can hold them)", kind, why)
    return served


def _beyond(declared: Reservation, budget: Budget) -> str | None:
    if declared.cpus is not None and declared.cpus > budget.cpus:
        return f"needs {declared.cpus} CPUs, this supervisor has {budget.cpus} (-n)"
    if (declared.memory is not None and budget.memory is not None
            and declared.memory > budget.memory):
        return (f"needs {format_size(declared.memory)}, this supervisor's memory budget "
                f"is {format_size(budget.memory)}")
    have = budget.resources
    for name, n in sorted((declared.resources or {}).items()):
        if n > have.get(name, 0):
            return (f"needs {name}={n}, this supervisor has "
                    + (f"{name}={have[name]}" if have.get(name) else f"no {name} (--resources)"))
    return None


def handler_max_attempts(kinds: list[str]) -> dict[str, int]:
    """Each loaded handler's ``@job(max_attempts=...)``: the claim fills it into rows
    whose producer left the column out."""
    found = {}
    for kind in kinds:
        handle = get_handler(kind)
        if handle is not None and handle.defaults.max_attempts is not None:
            found[kind] = handle.defaults.max_attempts
    return found


def handler_poison_after(kinds: list[str]) -> dict[str, int]:
    """Each loaded handler's ``@job(poison_after=...)`` (0: never poison)."""
    found = {}
    for kind in kinds:
        handle = get_handler(kind)
        if handle is not None and handle.defaults.poison_after is not None:
            found[kind] = handle.defaults.poison_after
    return found


def crash_rule(kinds: list[str]) -> CrashRule:
    """Which crash-like failures count as crashes for each loaded handler's kind
    (``@job(counts_as_crash=...)``), the built-in default for the rest."""
    found = {}
    for kind in kinds:
        handle = get_handler(kind)
        if handle is not None and handle.defaults.counts_as_crash is not None:
            found[kind] = handle.defaults.counts_as_crash
    return CrashRule(found)


def store_settings(kinds: list[str], max_attempts: int, poison_after: int) -> StoreSettings:
    """What the store applies to rows of ``kinds`` that leave it out: each loaded
    handler's ``max_attempts`` and ``poison_after`` (else the run's), and its crash rule."""
    return StoreSettings(handler_max_attempts(kinds), max_attempts,
                         handler_poison_after(kinds), poison_after, crash_rule(kinds))


def retry_delay(job: ClaimedJob, asked: float | None) -> float | None:
    """Seconds before the next attempt of ``job``: what the handler asked for with
    ``Retry(delay=...)``, else its kind's ``@job(backoff=...)``, else None (the store's
    default backoff)."""
    if asked is not None:
        return asked
    handle = get_handler(job.kind)
    if handle is None or handle.defaults.backoff is None:
        return None
    return handle.defaults.backoff.delay(job.attempt)
