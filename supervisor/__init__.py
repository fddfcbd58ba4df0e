"""The parent process, one package per room (see docs/architecture.md): the arbiter and the
CLI, ``engine`` (the job flow), ``db`` (connections and SQL), ``pool`` (the forked
children), ``observe``, ``schedules``, ``admin`` (the operator's queries) and
``dashboard``.

Producers without handler code use ``supervisor.enqueue`` and ``supervisor.enqueue_many``
(the same functions as ``shared.enqueue``), their asyncio twins ``enqueue_async`` and
``enqueue_many_async``, and ``enqueue_on_commit`` (after a Django transaction commits).
Fan-in: ``supervisor.wait(job_id, timeout)`` and ``await supervisor.wait_async(...)`` (a
job's result, or ``JobFailed``/``JobNotFound``/``TimeoutError``) and
``supervisor.batch(id)`` (a ``Batch`` found from any process). ``supervisor.Dep(id,
allow_failure=..., name=...)`` is one edge of ``depends_on``.

supervisord's import name is ``supervisor`` too: with both installed in one environment,
importing this package refuses with one line (``supervisor.namesake``)."""

from typing import Any

from supervisor.namesake import refuse_at_import

__pg_supervisor__ = True  # this file is pg-supervisor's, not supervisord's (namesake)
refuse_at_import()  # supervisord's files in this package: one clear line, not AttributeError

_PRODUCERS = {
    "enqueue": "shared.enqueue",
    "enqueue_many": "shared.enqueue",
    "enqueue_async": "shared.producers.aio",
    "enqueue_many_async": "shared.producers.aio",
    "enqueue_on_commit": "shared.oncommit",
    "wait": "shared.waiting",
    "wait_async": "shared.waiting_async",
    "JobFailed": "shared.waiting",
    "JobNotFound": "shared.waiting",
    "Batch": "shared.batches",
    "BatchSummary": "shared.batches",
    "Dep": "shared.dependencies",
    "Dependency": "shared.dependencies",
}
_RENAMED = {"batch": ("shared.batches", "find_batch")}
__all__ = [*_PRODUCERS, *_RENAMED]


def __getattr__(name: str) -> Any:
    # Loaded on first use so that `import supervisor.<module>` stays light.
    module, attr = _PRODUCERS.get(name), name
    if module is None and name in _RENAMED:
        module, attr = _RENAMED[name]
    if module is not None:
        import importlib

        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'supervisor' has no attribute {name!r}")
