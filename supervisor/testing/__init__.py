"""Helpers for testing code that enqueues jobs and the handlers that run them, without
``supervisor run`` (see docs/testing.md).

* ``enqueued(kind=, queue=, args=, conn=)``: the jobs waiting, as ``EnqueuedJob``
  records, filtered (``args`` by containment), to assert what code enqueued;
* ``drain(queues=, kinds=, conn=, fork=False, max_jobs=)``: run the due jobs in this
  process (or a forked child each) through the child's code path and the parent's
  writes, until none is due; returns a ``DrainSummary``;
* ``run_inline(handle, **args)``: call one handler as a job would run, no database.

The pytest fixtures are in ``supervisor.testing.plugin`` (see docs/testing.md). Names
load on first use, so the plugin, which pytest imports in every run once the package is
installed, costs nothing until a fixture is requested.
"""

from typing import Any

_NAMES = {
    "DrainSummary": "supervisor.testing.draining",
    "DrainedJob": "supervisor.testing.draining",
    "KindCounts": "supervisor.testing.draining",
    "drain": "supervisor.testing.draining",
    "EnqueuedJob": "supervisor.testing.enqueued_jobs",
    "enqueued": "supervisor.testing.enqueued_jobs",
    "JobBindingError": "supervisor.testing.inline",
    "JobResultError": "supervisor.testing.inline",
    "run_inline": "supervisor.testing.inline",
}
__all__ = list(_NAMES)


def __getattr__(name: str) -> Any:
    module = _NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'supervisor.testing' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
