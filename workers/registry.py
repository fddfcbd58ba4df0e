"""The handler registry: ``@job`` turns a function into a job kind with defaults.

The parent imports the handler modules (``--app``) once, before forking, so the registry
is filled in the parent and shared copy-on-write with every child. Producers use the same
handles to enqueue without knowing SQL.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Unpack

from shared import jobs
from shared.jobs import Backoff
from shared.options import (
    ENQUEUE_OPTIONS,
    JOB_OPTIONS,
    EnqueueOptions,
    JobOptions,
    check_names,
    job_options,
    over_defaults,
)
from shared.reservations import reservation
from shared.schedules import ScheduleError, ScheduleSpec, make_spec


class DuplicateKindError(RuntimeError):
    """Two handlers claim the same kind: which one runs would be a guess."""


@dataclass(frozen=True)
class JobDefaults:
    """A kind's defaults, set by ``@job``: ``options`` (every ``JobOptions``, copied
    onto each enqueued row unless the call overrides them), and what only the child
    and the supervisor use (``backoff``, ``soft_timeout``, ``heartbeat_timeout``)."""

    options: JobOptions = field(default_factory=lambda: job_options({}))
    backoff: Backoff = jobs.DEFAULT_BACKOFF
    soft_timeout: float | None = None  # None: the supervisor's default_soft_timeout; 0: none
    heartbeat_timeout: float | None = None  # None: the supervisor's heartbeat_timeout
    # "raise": a stop notice raises workers.Stopping in the handler; "flag" (default): it
    # only sets current_job().stopping.
    on_stop: str = "flag"
    poison_after: int | None = None  # None: the supervisor's poison_after; 0: never
    # The crash-like failures that count as crashes for this kind (shared.jobs.CrashRule);
    # None: defaults.COUNTS_AS_CRASH.
    counts_as_crash: frozenset[str] | None = None

    @property
    def queue(self) -> str:
        """The kind's queue."""
        return self.options["queue"]

    @property
    def priority(self) -> int:
        """The kind's priority (lower runs first)."""
        return self.options["priority"]

    @property
    def max_attempts(self) -> int | None:
        """The kind's attempts; None: the supervisor's config decides, at claim."""
        return self.options["max_attempts"]

    @property
    def timeout(self) -> float | None:
        """The kind's hard timeout in seconds; None: the supervisor's config."""
        return self.options["timeout"]


class ArgsDoNotFit(TypeError):
    """Args given to a handle's enqueue do not fit its handler's signature; the message
    is the one a child would have recorded when discarding the job (``binding``)."""


class JobHandle:
    """A registered handler: call it like the function, or enqueue it as a job. Args
    enqueued through the handle are checked against the handler's signature at once
    (``ArgsDoNotFit``); ``shared.enqueue.enqueue("kind", ...)``, which has no handler to
    check against, leaves that to the child."""

    def __init__(self, func: Callable[..., Any], kind: str, defaults: JobDefaults,
                 schedule: ScheduleSpec | None = None) -> None:
        self.func = func
        self.kind = kind
        self.defaults = defaults
        self.schedule = schedule  # from @job(cron=...) or @job(every=...); the parent fires it
        self.signature = inspect.signature(func)
        self._checker: Any = None
        functools.update_wrapper(self, func)

    def check_args(self, args: Mapping[str, Any]) -> None:
        """Raise ``ArgsDoNotFit`` when ``args`` cannot be bound to the handler's
        signature (a required argument missing, an unknown one given)."""
        if self._checker is None:
            from workers.binding import ArgsChecker

            self._checker = ArgsChecker(self.signature)
        try:
            self._checker.check(dict(args))
        except TypeError as exc:
            raise ArgsDoNotFit(f"args do not fit {self.kind}{self.signature}: {exc}") from None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<job {self.kind!r} queue={self.defaults.queue!r}>"

    def options(self, **options: Unpack[EnqueueOptions]) -> BoundJob:
        """The same kind with per-call options (``shared.options.EnqueueOptions``):
        queue, priority, max_attempts, timeout, run_at or delay, unique_key, depends_on
        (job ids to wait for), concurrency_key (jobs sharing it run at most their queue's
        per-key limit at once), conn (enqueue in the caller's transaction), dsn. An option
        given as None keeps the kind's default."""
        return BoundJob(self, {}).options(**options)

    def bind(self, **args: Any) -> Any:
        """This kind with ``args``, to enqueue later: ``enqueue_many(..., then=...)``."""
        return BoundJob(self, {}).bind(**args)

    def enqueue(self, **args: Any) -> int:
        """Insert one job with ``args`` as its keyword arguments; returns its id."""
        from shared.enqueue import enqueue

        # The hot path of web apps: no BoundJob, nothing to layer.
        self.check_args(args)
        return enqueue(self.kind, args, **self.defaults.options)

    def enqueue_many(self, args_list: Iterable[Mapping[str, Any]], then: Any = None, *,
                     on_failure: Any = None,
                     concurrency_keys: Sequence[str | None] | None = None,
                     max_failures: int | None = None,
                     max_failure_rate: float | None = None) -> Any:
        """Insert many jobs of this kind in one COPY; returns their ids in order, or with
        ``then=other.bind(...)`` a ``Batch`` whose last final member enqueues ``then``
        (``on_failure=``: enqueued instead when a member did not complete).
        ``concurrency_keys``: one per job (None for none), for per-key limits.
        ``max_failures``/``max_failure_rate``: the batch's failure budget."""
        return BoundJob(self, {}).enqueue_many(args_list, then=then, on_failure=on_failure,
                                               concurrency_keys=concurrency_keys,
                                               max_failures=max_failures,
                                               max_failure_rate=max_failure_rate)

    async def enqueue_async(self, **args: Any) -> int:
        """``enqueue`` for asyncio (``conn=`` an async connection, if any)."""
        return await BoundJob(self, {}).enqueue_async(**args)

    async def enqueue_many_async(self, args_list: Iterable[Mapping[str, Any]]) -> list[int]:
        """``enqueue_many`` for asyncio."""
        return await BoundJob(self, {}).enqueue_many_async(args_list)

    def enqueue_on_commit(self, **args: Any) -> None:
        """Enqueue once Django's current transaction on its default database commits."""
        BoundJob(self, {}).enqueue_on_commit(**args)


class BoundJob:
    """A handle with options bound, from ``JobHandle.options(...)``."""

    def __init__(self, handle: JobHandle, options: EnqueueOptions) -> None:
        self.handle = handle
        self.opts = options

    def options(self, **options: Unpack[EnqueueOptions]) -> BoundJob:
        """Layer more options over these."""
        check_names(options, ENQUEUE_OPTIONS, "options")
        return BoundJob(self.handle, {**self.opts, **options})

    def _resolved(self) -> dict[str, Any]:
        return over_defaults(self.handle.defaults.options, self.opts)


    def _check_each(self, args_list: list[Any]) -> None:
        """``check_args`` for every mapping of ``args_list``, naming the index of the first
        that does not fit (a non-mapping is left to enqueue_many's own message)."""
        for index, args in enumerate(args_list):
            if isinstance(args, Mapping):
                try:
                    self.handle.check_args(args)
                except ArgsDoNotFit as exc:
                    raise ArgsDoNotFit(f"args_list[{index}]: {exc}") from None

    def enqueue(self, **args: Any) -> int:
        """Insert one job; returns its id (an existing job's id if unique_key matched)."""
        from shared.enqueue import enqueue

        self.handle.check_args(args)
        return enqueue(self.handle.kind, args, **self._resolved())

    def bind(self, **args: Any) -> Any:
        """This kind with ``args`` and these options, to enqueue later (a batch's
        callback); only how the job runs (``JobOptions``) is kept."""
        from shared.batches import Callback

        self.handle.check_args(args)
        return Callback(self.handle.kind, args, **job_options(self._resolved()))

    def enqueue_many(self, args_list: Iterable[Mapping[str, Any]], then: Any = None, *,
                     on_failure: Any = None,
                     concurrency_keys: Sequence[str | None] | None = None,
                     max_failures: int | None = None,
                     max_failure_rate: float | None = None) -> Any:
        """Insert many jobs in one statement; returns their ids in order (a ``Batch``
        with ``then`` or ``on_failure``). ``concurrency_keys``: one per job (None for
        none). ``max_failures``/``max_failure_rate``: the batch's failure budget."""
        from shared.enqueue import enqueue_many

        args_list = list(args_list)
        self._check_each(args_list)
        options = self._resolved()
        if concurrency_keys is not None:
            options["concurrency_keys"] = concurrency_keys
        return enqueue_many(self.handle.kind, args_list, then=then, on_failure=on_failure,
                            max_failures=max_failures, max_failure_rate=max_failure_rate,
                            **options)

    async def enqueue_async(self, **args: Any) -> int:
        """``enqueue`` for asyncio: awaits the insert on an async connection."""
        from shared.producers.aio import enqueue_async

        self.handle.check_args(args)
        return await enqueue_async(self.handle.kind, args, **self._resolved())

    async def enqueue_many_async(self, args_list: Iterable[Mapping[str, Any]]) -> list[int]:
        """``enqueue_many`` for asyncio."""
        from shared.producers.aio import enqueue_many_async

        args_list = list(args_list)
        self._check_each(args_list)
        return await enqueue_many_async(self.handle.kind, args_list, **self._resolved())

    def enqueue_on_commit(self, **args: Any) -> None:
        """Enqueue once Django's current transaction on its default database commits (at
        once outside a transaction; never if it rolls back). Returns nothing: the id
        exists only after the commit."""
        from shared.oncommit import enqueue_on_commit

        self.handle.check_args(args)
        enqueue_on_commit(self.handle.kind, args, **self._resolved())


REGISTRY: dict[str, JobHandle] = {}


def job(
    func: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    backoff: Backoff | None = None,
    soft_timeout: float | None = None,
    heartbeat_timeout: float | None = None,
    on_stop: str = "flag",
    cron: str | None = None,
    every: float | None = None,
    timezone: str | None = None,
    catch_up: bool = False,
    overlap: bool = True,
    poison_after: int | None = None,
    counts_as_crash: Iterable[str] | None = None,
    **options: Unpack[JobOptions],
) -> Any:
    """Register a handler. Use bare (``@job``) or with options (``@job(queue="images")``).

    ``options`` (``shared.options.JobOptions``: queue, priority, max_attempts, timeout)
    are the kind's defaults, copied onto each job enqueued through its handle; a call's
    own options override them. The kind is the function's name unless ``name`` is
    given; registering a second handler for a kind raises ``DuplicateKindError``.
    ``timeout`` is the hard limit in seconds for one attempt; ``backoff`` shapes the
    delay between attempts;
    ``soft_timeout`` raises ``workers.SoftTimeout`` inside the handler after that many
    seconds (0: never), so it can clean up before the hard timeout kills it.
    ``heartbeat_timeout`` (seconds, > 0) overrides the supervisor's for this kind: a
    child running it is hung once neither heartbeats nor its CPU time moved for that
    long (a handler busy in native code that holds the GIL is not hung).
    ``on_stop``: when the job is about to be stopped from outside (a drain, a cancel, a
    fence, a memory recycle) ``current_job().stopping`` becomes true; with ``"raise"``
    ``workers.Stopping`` is also raised in the handler, so it can checkpoint and let it
    out (see docs/long-jobs.md).

    ``cron`` (5 fields, or 6 with seconds first, read in ``timezone``) or ``every``
    (seconds) also makes it a schedule named after the kind: supervisors that load this
    module enqueue it once per slot (``catch_up``, ``overlap``: see docs/schedules.md).
    A bad expression or timezone raises ``ScheduleError`` here, at import.

    ``poison_after`` (default: the supervisor's, 2): attempts in a row that crash the
    same way (same signal, memory, hung, timeout) before the job is discarded as
    ``poison`` with its remaining attempts unspent; 0 turns it off for this kind.
    ``counts_as_crash`` names which crash-like failures count as crashes, toward poison
    and the kind's circuit breaker: any of ``crashed`` (the child died by a signal or
    an exit), ``hung`` (heartbeat lost), ``timeout``, ``memory``; default ``{"crashed",
    "hung"}``: a kind that times out is retried until its ``max_attempts``.
    """
    check_names(options, JOB_OPTIONS, "job")
    row = job_options(options)
    if row["max_attempts"] is not None and row["max_attempts"] < 1:
        raise ValueError("max_attempts must be at least 1")
    if row["timeout"] is not None and row["timeout"] <= 0:
        raise ValueError("timeout must be positive")
    needs = reservation(row)
    row["memory"] = needs.memory  # "6GiB" once, as bytes
    row["resources"] = needs.resources
    if soft_timeout is not None and not 0 <= soft_timeout < float("inf"):
        raise ValueError("soft_timeout must be a number of seconds >= 0 (0: none)")
    if heartbeat_timeout is not None and not (
            isinstance(heartbeat_timeout, int | float) and not isinstance(heartbeat_timeout, bool)
            and 0 < heartbeat_timeout < float("inf")):
        raise ValueError(f"heartbeat_timeout must be a number of seconds > 0, not "
                         f"{heartbeat_timeout!r}")
    if on_stop not in ("flag", "raise"):
        raise ValueError(f"on_stop must be 'flag' or 'raise', not {on_stop!r}")
    if poison_after is not None and not (isinstance(poison_after, int)
                                         and not isinstance(poison_after, bool)
                                         and poison_after >= 0):
        raise ValueError(f"poison_after must be a whole number >= 0 (0: off), not "
                         f"{poison_after!r}")
    counted = jobs.crash_kinds(counts_as_crash, "counts_as_crash")
    defaults = JobDefaults(options=row, poison_after=poison_after, counts_as_crash=counted,
                           backoff=backoff or jobs.DEFAULT_BACKOFF,
                           soft_timeout=soft_timeout, on_stop=on_stop,
                           heartbeat_timeout=float(heartbeat_timeout) if heartbeat_timeout
                           else None)

    def register(f: Callable[..., Any]) -> JobHandle:
        kind = name or f.__name__
        if inspect.iscoroutinefunction(f) or inspect.isasyncgenfunction(f):
            # Called synchronously in a child, it would return an un-awaited coroutine and
            # fail every attempt; refused here, at import, in one line.
            raise TypeError(f"@job {kind}: handlers run synchronously in a child process, "
                            "so an 'async def' one is refused; write a plain 'def' (use "
                            "asyncio.run(...) inside it to call async code)")
        schedule = None
        if cron is not None or every is not None or timezone is not None:
            schedule = make_spec(kind, kind, cron=cron, every=every, timezone=timezone,
                                 queue=row["queue"], priority=row["priority"],
                                 catch_up=catch_up, overlap=overlap, source="code")
            try:  # a scheduled job gets no args: a handler that needs some would be discarded
                inspect.signature(f).bind()
            except TypeError as exc:
                raise ScheduleError(f"schedule {kind!r}: the handler needs arguments ({exc}); "
                                    "give them defaults, or define the schedule in the config "
                                    "file with args") from None
        existing = REGISTRY.get(kind)
        if existing is not None and not _same_definition(existing.func, f):
            where = f"{existing.func.__module__}.{existing.func.__qualname__}"
            raise DuplicateKindError(f"job kind {kind!r} is already registered by {where}")
        handle = JobHandle(f, kind, defaults, schedule)
        REGISTRY[kind] = handle
        return handle

    if func is not None:
        return register(func)
    return register


def _same_definition(old: Callable[..., Any], new: Callable[..., Any]) -> bool:
    # A module reloaded on SIGHUP defines its handlers again: that replaces, it does not clash.
    return old is new or (old.__module__, old.__qualname__) == (new.__module__, new.__qualname__)


def get_handler(kind: str) -> JobHandle | None:
    """The handle registered for ``kind``, or None."""
    return REGISTRY.get(kind)


def queues_of_handlers() -> list[str]:
    """Every queue a registered handler names, sorted: the default set ``run`` serves."""
    return sorted({h.defaults.queue for h in REGISTRY.values()})
