"""The pool room: pre-forked children and the policy that keeps them.

Door: ``Pool`` (policy: spawn, dispatch, kill, reap, recycle, crash loop), its settings
and the records it reports through ``Pool.take_outcomes()``; ``ChildReport``, what
``Pool.child_reports()`` says of each child for the heartbeat; ``RunTimes``, how long
jobs run here, which the pool feeds at each answer and the engine reads. Behind it, each child is a
``ChildProcess`` (its pipes, frames, queue of jobs and deadlines). Nothing here touches the
database.
"""

from supervisor.pool.forkwaves import ForkWaves
from supervisor.pool.outcomes import (
    ChildEvent,
    ChildEventKind,
    JobCheckpoint,
    JobDone,
    JobExpired,
    JobFailed,
    JobProgress,
    JobReturned,
    JobStarted,
    NativeJob,
    Outcome,
    PoolHalted,
    ReturnTo,
)
from supervisor.pool.pool import Pool
from supervisor.pool.report import ChildReport
from supervisor.pool.runtimes import RunTimes
from supervisor.pool.settings import PoolSettings

__all__ = ["ChildEvent", "ChildEventKind", "ChildReport", "ForkWaves", "JobCheckpoint", "JobDone",
           "JobExpired", "JobFailed", "JobProgress", "JobReturned", "JobStarted", "NativeJob",
           "Outcome", "Pool", "PoolHalted", "PoolSettings", "ReturnTo", "RunTimes"]
