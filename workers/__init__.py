"""The child side: handler registry (``@job``), job context (``current_job``) and the
child runtime. Handler modules import ``job`` and ``current_job`` from here."""

from workers.context import JobContext, current_job
from workers.outcomes import Discard, Retry, Snooze, SoftTimeout
from workers.registry import JobHandle, job

__all__ = ["Discard", "JobContext", "JobHandle", "Retry", "Snooze", "SoftTimeout", "current_job",
           "job"]
