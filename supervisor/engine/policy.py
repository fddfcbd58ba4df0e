"""Where a claimed job's policy comes from: its own row, then its handler's ``@job``
settings, then the supervisor's config (DESIGN, "Settings: where a job's policy comes
from"). Resolved once, at claim, so the pool and the writes see final values."""

from __future__ import annotations

from shared.jobs import ClaimedJob
from workers.registry import get_handler


def resolve_timeout(job: ClaimedJob, configured: float | None) -> float | None:
    """The hard timeout of ``job``'s attempt in seconds (None: no limit; a 0 anywhere
    in the chain disables it)."""
    timeout = job.timeout
    if timeout is None:
        handle = get_handler(job.kind)
        if handle is not None:
            timeout = handle.defaults.timeout
    if timeout is None:
        timeout = configured
    return timeout or None
