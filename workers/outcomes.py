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


class Snooze(Exception):
    """Run the job again ``delay`` seconds from now, without spending an attempt and
    without an errors entry: "not yet", not "failed"."""

    def __init__(self, delay: float) -> None:
        try:
            delay = float(delay)
        except (TypeError, ValueError):
            raise TypeError(f"Snooze takes a delay in seconds, not {delay!r}") from None
        if not delay >= 0 or delay == float("inf"):
            raise ValueError(f"Snooze delay must be a finite number of seconds >= 0, not {delay}")
        super().__init__(f"snoozed for {delay:g} s")
        self.delay = delay


class SoftTimeout(Exception):
    """Raised inside a handler when its job passes its soft timeout (``@job(soft_timeout=
    ...)`` or the supervisor's ``default_soft_timeout``), before the hard timeout kills
    the child: catch it to clean up. Uncaught, the attempt fails like any exception."""


class Stopping(Exception):
    """The job is about to be stopped from outside (a drain, a cancel, a fence, a memory
    recycle). Raised inside a handler that opted in with ``@job(on_stop="raise")``;
    others see ``current_job().stopping``. Let it out (or raise it yourself) after a
    checkpoint: a job stopped for a drain or a fence goes back without spending its
    attempt and without an errors entry, and resumes from its checkpoint."""

    def __init__(self, reason: str = "drain") -> None:
        super().__init__(f"stopping: {reason}")
        self.reason = reason
