"""Exceptions a handler raises to steer what happens to its job."""

from __future__ import annotations


class Discard(Exception):
    """End the job now, without retry; the reason is recorded in its errors."""

    def __init__(self, reason: str = "discarded by handler") -> None:
        super().__init__(reason)
        self.reason = reason


class Retry(Exception):
    """Ask for another attempt after ``delay`` seconds (None: the kind's backoff).

    The attempt still counts: a job that keeps asking is discarded at ``max_attempts``.
    """

    def __init__(self, delay: float | None = None, reason: str = "retry requested") -> None:
        super().__init__(reason)
        self.delay = delay
        self.reason = reason
