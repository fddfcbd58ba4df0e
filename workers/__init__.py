"""The child side: handler registry (``@job``), job context (``current_job``) and the
child runtime. Handler modules import ``job`` and ``current_job`` from here, and
``Backoff`` for ``@job(backoff=...)``; ``child_scope``, ``joblib_config`` and
``loky_executor`` for processes that outlive a job (``workers.childscope``)."""

from shared.jobs import Backoff
from workers.childscope import child_scope
from workers.context import JobContext, current_job
from workers.hooks import HookError, around_job, on_child_exit, on_child_start, on_discard
from workers.lokypool import joblib_config, loky_executor
from workers.outcomes import Discard, Retry, Snooze, SoftTimeout, Stopping
from workers.registry import ArgsDoNotFit, JobHandle, job

__all__ = ["ArgsDoNotFit", "Backoff", "Discard", "HookError", "JobContext", "JobHandle", "Retry",
           "Snooze", "SoftTimeout", "Stopping", "around_job", "child_scope", "current_job", "job",
           "joblib_config", "loky_executor", "on_child_exit", "on_child_start", "on_discard"]
