"""Where a claimed job's policy comes from: its own row, then its handler's ``@job``
settings, then the supervisor's config (DESIGN, "Settings: where a job's policy comes
from"). Resolved once, at claim, so the pool and the writes see final values."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from shared.jobs import ClaimedJob, CrashRule
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


def handler_resources(kinds: list[str]) -> dict[str, dict[str, int]]:
    """Each loaded handler's ``@job(resources=...)``: what a job of its kind holds when
    its row names none (enqueued by kind name, by SQL or the CLI), as it gets the
    handler's timeout."""
    found = {}
    for kind in kinds:
        handle = get_handler(kind)
        resources = handle.defaults.options.get("resources") if handle is not None else None
        if resources:
            found[kind] = dict(resources)
    return found


def served_kinds(kinds: list[str], have: Mapping[str, int]) -> list[str]:
    """``kinds`` less those whose handler's ``@job(resources=...)`` this supervisor can
    never hold (``have``: its ``--resources``); each left out is logged once."""
    served = []
    for kind in kinds:
        handle = get_handler(kind)
        needs = handle.defaults.options.get("resources") if handle is not None else None
        lacking = sorted(name for name, n in (needs or {}).items() if n > have.get(name, 0))
        if not lacking:
            served.append(kind)
            continue
        name = lacking[0]
        log.warning("kind %s needs %s=%d, this supervisor has %s: not served here "
                    "(its jobs wait for a supervisor that has them)", kind, name,
                    (needs or {})[name],
                    f"{name}={have[name]}" if have.get(name) else f"no {name} (--resources)")
    return served


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
