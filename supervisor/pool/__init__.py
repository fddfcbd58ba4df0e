"""The pool room: pre-forked children and the policy that keeps them.

Door: ``Pool`` (policy: spawn, dispatch, kill, reap, recycle, crash loop), its settings
and the records it reports through ``Pool.take_outcomes()``. Behind it, each child is a
``ChildProcess`` (its pipes, frames, queue of jobs and deadlines). Nothing here touches the
database.
"""

from supervisor.pool.outcomes import (
    ChildEvent,
    JobDone,
    JobExpired,
    JobFailed,
    JobProgress,
    JobReturned,
    JobStarted,
    Outcome,
    PoolHalted,
)
from supervisor.pool.pool import Pool
from supervisor.pool.settings import PoolSettings

__all__ = ["ChildEvent", "JobDone", "JobExpired", "JobFailed", "JobProgress", "JobReturned",
           "JobStarted", "Outcome", "Pool", "PoolHalted", "PoolSettings"]
