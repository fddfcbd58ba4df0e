"""``run_inline()``: one handler called as a job would run it, without a database."""

from __future__ import annotations

import itertools
from typing import Any

import orjson

from shared import wire
from shared.jobs import (
    DEFAULT_MAX_ATTEMPTS,
    FAIL_ARGS,
    FAIL_BINDING,
    FAIL_RESULT,
    FAIL_UNKNOWN_KIND,
)
from workers.execution import JobExecutor
from workers.registry import JobHandle

_ids = itertools.count(1)


class JobBindingError(TypeError):
    """The args do not fit the handler's signature: the error a child records when it
    discards such a job (``binding``), word for word."""


class JobResultError(ValueError):
    """The handler returned what cannot be stored as its result (not JSON, not finite,
    over the size cap): the error a child records (``result``)."""


def run_inline(handle: JobHandle, /, **args: Any) -> Any:
    """Call ``handle`` (a ``@job`` handler) with ``args`` as a job runs: the args as
    they come out of the JSON they would be stored as, bound to its signature, a
    ``current_job()`` whose id is fake (attempt 1, the handler's queue), and the result
    checked and returned as it would be stored (JSON round trip: a tuple comes back a
    list). Raises ``JobBindingError`` when the args do not fit, the handler's own
    exception (``Discard``, ``Retry``, ``Snooze`` included) when it raises, and
    ``JobResultError`` for a result that cannot be stored. No database is touched
    unless the handler itself touches one."""
    if not isinstance(handle, JobHandle):
        raise TypeError(f"run_inline takes a @job handler, not {handle!r}")
    job_id = -next(_ids)  # never a real job's id
    try:
        args_json = orjson.dumps(args).decode()
    except TypeError as exc:
        raise TypeError(f"args of {handle.kind} are not JSON: {exc}") from None
    attempts = handle.defaults.max_attempts or DEFAULT_MAX_ATTEMPTS
    run = wire.Run(job_id, handle.kind, handle.defaults.queue, 1, attempts,
                   args=orjson.loads(args_json))
    executor = JobExecutor(keep_exception=True,
                           lookup=lambda kind: handle if kind == handle.kind else None)
    answer = executor.run(run)
    if isinstance(answer, wire.Done):
        return orjson.loads(answer.result)
    if answer.kind == FAIL_BINDING:
        raise JobBindingError(answer.message) from executor.raised
    if answer.kind == FAIL_RESULT:
        raise JobResultError(answer.message)
    if answer.kind in (FAIL_ARGS, FAIL_UNKNOWN_KIND) or executor.raised is None:
        raise RuntimeError(f"{answer.kind}: {answer.message}")
    raise executor.raised
