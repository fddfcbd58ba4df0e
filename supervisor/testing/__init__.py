"""Helpers for testing code that enqueues jobs and the handlers that run them, without
``supervisor run`` (see docs/testing.md).

* ``enqueued(kind=, queue=, args=, conn=)``: the jobs waiting, as ``EnqueuedJob``
  records, filtered (``args`` by containment), to assert what code enqueued;
* ``drain(queues=, kinds=, conn=, fork=False, max_jobs=)``: run the due jobs in this
  process (or a forked child each) through the child's code path and the parent's
  writes, until none is due; returns a ``DrainSummary``;
* ``run_inline(handle, **args)``: call one handler as a job would run, no database.

The pytest fixtures are in ``supervisor.testing.plugin`` (opt-in: see docs/testing.md).
"""

from supervisor.testing.draining import DrainedJob, DrainSummary, KindCounts, drain
from supervisor.testing.enqueued import EnqueuedJob, enqueued
from supervisor.testing.inline import JobBindingError, JobResultError, run_inline

__all__ = ["DrainSummary", "DrainedJob", "EnqueuedJob", "JobBindingError", "JobResultError",
           "KindCounts", "drain", "enqueued", "run_inline"]
