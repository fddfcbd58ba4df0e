"""Per-child and per-job hooks: code of yours that runs in each child around its jobs.

``@on_child_start`` runs in each child after the fork, before its first job (load a
model once per child, open a handle, reseed numpy); a hook that raises is a boot
failure, so the crash-loop rules apply. ``@on_child_exit`` runs when a child stops
(its errors are logged). ``@around_job`` registers a context-manager factory called
with each job's ``JobContext``: every job runs inside it (timing, context variables,
cleanup); one that raises entering or leaving fails that job with kind ``hook``.
``@on_discard`` runs once, in the child, when a job it ran is finally discarded, with
the job and the errors of that attempt: a dead-letter hook.

Hooks run in the order they were registered (the first ``around_job`` is outermost).
Registering something that is not callable, or the same function twice, raises
``HookError`` at import; a module reloaded on SIGHUP registers its hooks again, which
replaces them.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

from shared.jobs import TERMINAL_FAILURES


class HookError(TypeError):
    """A hook registered wrongly: not callable, or registered twice."""


class HookFailed(Exception):
    """An ``around_job`` hook raised (``cause``): the job fails with kind ``hook``."""

    def __init__(self, hook: Callable[..., Any], cause: BaseException) -> None:
        super().__init__(f"around_job {_name(hook)} raised")
        self.hook = hook
        self.cause = cause


CHILD_START: list[Callable[[], Any]] = []
CHILD_EXIT: list[Callable[[], Any]] = []
AROUND_JOB: list[Callable[[Any], Any]] = []
DISCARD: list[Callable[[Any, list[dict[str, Any]]], Any]] = []


def _name(func: Callable[..., Any]) -> str:
    return f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', repr(func))}"


def _register(hooks: list, func: Any, what: str) -> Any:
    if not callable(func):
        raise HookError(f"@{what} needs a function, not {func!r}")
    for i, known in enumerate(hooks):
        if known is func:
            raise HookError(f"@{what}: {_name(func)} is already registered")
        if _name(known) == _name(func):  # the same definition, reloaded: replace it
            hooks[i] = func
            return func
    hooks.append(func)
    return func


def on_child_start(func: Callable[[], Any]) -> Callable[[], Any]:
    """Run ``func()`` in each child after the fork, before its first job. If it raises,
    the child dies as a boot failure (repeated, the pool halts as a crash loop). It runs
    inside a child scope: the processes and process pools it starts belong to the child
    and outlive its jobs (``workers.childscope``)."""
    return _register(CHILD_START, func, "on_child_start")


def on_child_exit(func: Callable[[], Any]) -> Callable[[], Any]:
    """Run ``func()`` in each child when it stops (asked to, recycled, or its parent's
    pipe closed; not when it is killed). Errors are logged."""
    return _register(CHILD_EXIT, func, "on_child_exit")


def around_job(func: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Wrap every job: ``func(job)`` (``job`` is its ``JobContext``) returns a context
    manager the handler runs inside (``contextlib.contextmanager`` makes one of a
    generator). If it raises entering or leaving, the job fails with kind ``hook``;
    it cannot swallow the handler's exception."""
    return _register(AROUND_JOB, func, "around_job")


def on_discard(func: Callable[[Any, list[dict[str, Any]]], Any]) -> Callable[..., Any]:
    """Run ``func(job, errors)`` once, in the child, when a job it ran is finally
    discarded (``Discard``, args that do not fit, or its last attempt failed): ``job``
    is its ``JobContext``, ``errors`` the errors entry of that attempt. Errors are
    logged; the job is discarded either way."""
    return _register(DISCARD, func, "on_discard")


def run_child_start() -> None:
    """Every ``on_child_start`` hook, in order; the first that raises propagates."""
    for hook in CHILD_START:
        hook()


def run_child_exit(say: Callable[[str], None]) -> None:
    """Every ``on_child_exit`` hook, in order; ``say`` logs one that raised."""
    for hook in CHILD_EXIT:
        try:
            hook()
        except BaseException as exc:
            say(f"on_child_exit {_name(hook)} raised {type(exc).__name__}: {exc}")


def call_around(context: Any, call: Callable[[], Any]) -> Any:
    """``call()`` inside every ``around_job`` hook. Returns its result or raises its
    exception; raises ``HookFailed`` if a hook raised (the first to)."""
    entered: list[tuple[Callable[..., Any], Any]] = []
    for hook in AROUND_JOB:
        try:
            manager = hook(context)
            manager.__enter__()
        except BaseException as exc:
            _leave(entered, exc)
            raise HookFailed(hook, exc) from exc
        entered.append((hook, manager))
    try:
        result = call()
    except BaseException as exc:
        failed = _leave(entered, exc)
        if failed is not None:
            raise failed from exc
        raise
    failed = _leave(entered, None)
    if failed is not None:
        raise failed
    return result


def _leave(entered: list, exc: BaseException | None) -> HookFailed | None:
    """Leave every entered hook, innermost first; the first that raised, if any."""
    failed = None
    for hook, manager in reversed(entered):
        try:
            if exc is None:
                manager.__exit__(None, None, None)
            else:
                manager.__exit__(type(exc), exc, exc.__traceback__)
        except BaseException as error:
            if failed is None:
                failed = HookFailed(hook, error)
    return failed


def is_final(kind: str, attempt: int, max_attempts: int) -> bool:
    """Whether a failure of ``kind`` on this attempt discards the job."""
    return kind in TERMINAL_FAILURES or (kind != "snooze" and attempt >= max_attempts)


def run_discard(context: Any, errors: list[dict[str, Any]],
                say: Callable[[str], None]) -> None:
    """Every ``on_discard`` hook with the job and its errors; ``say`` logs one that
    raised."""
    for hook in DISCARD:
        try:
            hook(context, errors)
        except BaseException as exc:
            say(f"on_discard {_name(hook)} raised for job {context.id}: "
                f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
