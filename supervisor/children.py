"""The pool of pre-forked children: what the parent loop imports.

The pool is split by concern: ``supervisor.childproc`` (settings, the record kept per
child, forking one), ``supervisor.poolio`` (frames in and out), ``supervisor.pool`` (the
lifecycle policy: dispatch, deadlines, kills, reaping, size) and
``supervisor.outcomes`` (what it reports). This module gathers the public names.
"""

from supervisor.childproc import PoolSettings
from supervisor.outcomes import ChildEvent, JobDone, JobFailed, JobProgress, PoolHalted
from supervisor.pool import Pool

__all__ = ["ChildEvent", "JobDone", "JobFailed", "JobProgress", "Pool", "PoolHalted",
           "PoolSettings"]
