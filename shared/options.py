"""The options a job is enqueued with, declared once for every way of enqueuing it.

- ``JobOptions``: how a job runs, as its row says (queue, priority, max_attempts,
  timeout). ``@job(...)`` sets them as its kind's defaults, a batch's callback
  (``handle.bind``) carries them, and any call may override them.
- ``CallOptions``: what one call may add (run_at or delay, unique_key, concurrency_key,
  expires_in or expires_at, depends_on: the jobs to wait for) and where the rows go
  (conn, dsn): every form of enqueue takes these.
- ``EnqueueOptions``: the options of enqueuing one job; ``handle.options(...)`` takes
  these.
- ``ManyOptions``: enqueuing many may give a key per job (unique_keys,
  concurrency_keys).

Each is a ``TypedDict``, and the keyword arguments of ``supervisor.enqueue``,
``enqueue_many``, their asyncio twins, ``enqueue_on_commit``, ``handle.options`` and
``@job`` are typed by it (``**options: Unpack[EnqueueOptions]``): an option is declared
here once and every form takes it, with its type known to editors and type checkers.
What a value may be is checked in ``shared.producers.plans`` before the database is
touched; an option left out takes its default (``DEFAULTS``: the default queue and
priority, None for the rest; None for max_attempts and timeout means the handler's
setting, resolved when the job is claimed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypedDict, cast

from shared import jobs


@dataclass(frozen=True)
class Dep:
    """One edge of ``depends_on``: the job ``id`` to wait for; ``allow_failure`` runs the
    dependent even if that job ends discarded, cancelled or expired (as RQ's
    ``Dependency(allow_failure=True)``); ``name`` lets the dependent find it by name
    (``current_job().dependency(name)``). Checked by ``shared.dependencies``."""

    id: int
    allow_failure: bool = False
    name: str | None = None


class JobOptions(TypedDict, total=False):
    """How a job runs, as its row says: a kind's defaults, a callback's, a call's."""

    queue: str
    priority: int  # lower runs first
    max_attempts: int | None  # None: the handler's, else the supervisor's config
    timeout: float | None  # seconds of one attempt; None: the handler's, else the config
    cpus: int | None  # children's worth of the budget it takes while running; None: 1
    memory: int | str | None  # bytes (or "6GiB") it reserves; None: its kind's history
    resources: Mapping[str, int] | None  # counted resources it holds while running: {"gpu": 1}


class CallOptions(JobOptions, total=False):
    """What any enqueue call may say besides how the job runs."""

    run_at: datetime | None  # timezone-aware; the job waits until then
    delay: float | None  # seconds from now (give run_at or delay, not both)
    unique_key: str | None  # a live job with this key is returned instead of a new one
    concurrency_key: str | None  # see `supervisor queues limit --per-key-max-running`
    expires_in: float | None  # seconds from now: not started by then, it ends 'expired'
    expires_at: datetime | None  # timezone-aware; the same at a moment (give one of two)
    # jobs that must end first: ids or Deps, or names -> them (shared.dependencies)
    depends_on: Sequence[int | Dep] | Mapping[str, int | Dep] | None
    conn: Any  # the caller's connection: the job is written in its transaction
    dsn: str | None  # the database, when no conn is given (see shared.dsn)


class EnqueueOptions(CallOptions, total=False):
    """The options of enqueuing one job (``enqueue``, ``handle.options``)."""


class ManyOptions(CallOptions, total=False):
    """The options of enqueuing many jobs of a kind at once (``enqueue_many``)."""

    unique_keys: Sequence[str | None] | None  # one per job (None: no key)
    concurrency_keys: Sequence[str | None] | None  # one per job (None: no key)


JOB_OPTIONS = frozenset(JobOptions.__optional_keys__)
CALL_OPTIONS = frozenset(CallOptions.__optional_keys__)
ENQUEUE_OPTIONS = frozenset(EnqueueOptions.__optional_keys__)
MANY_OPTIONS = frozenset(ManyOptions.__optional_keys__)

DEFAULTS: JobOptions = {"queue": jobs.DEFAULT_QUEUE, "priority": jobs.DEFAULT_PRIORITY,
                        "max_attempts": None, "timeout": None, "cpus": None, "memory": None,
                        "resources": None}
_EVERY_DEFAULT: dict[str, Any] = {**dict.fromkeys(ENQUEUE_OPTIONS | MANY_OPTIONS), **DEFAULTS}


def check_names(options: Mapping[str, Any], accepted: frozenset[str], where: str) -> None:
    """Refuse an option ``where`` does not take, as Python refuses an unexpected keyword
    argument (``TypeError``)."""
    unknown = options.keys() - accepted
    if unknown:
        raise TypeError(f"{where}() got an unexpected keyword argument {min(unknown)!r}")


def resolved(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` with every option present, those left out at their defaults (values
    given, None included, are kept as given: they are checked, not replaced)."""
    return {**_EVERY_DEFAULT, **options}


def job_options(options: Mapping[str, Any]) -> JobOptions:
    """The ``JobOptions`` part of ``options`` (a call's), with defaults filled in."""
    full = resolved(options)
    return cast(JobOptions, {name: full[name] for name in JOB_OPTIONS})


def over_defaults(defaults: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
    """A call's ``options`` layered over a kind's ``defaults``; an option given as None
    keeps the kind's default (``handle.options(queue=None)``)."""
    return {**defaults, **{name: value for name, value in options.items()
                           if value is not None}}
