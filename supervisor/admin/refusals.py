"""The refusal every admin query raises, and the checks they share, apart from the
queries themselves so that ``status`` and ``limits`` both build on it."""

from __future__ import annotations

MAX_QUEUE_NAME = 255  # the CHECK on supervisor.jobs.queue


class AdminError(Exception):
    """A refusal to report as one line (unknown job, wrong state, unique key taken).
    ``usage`` is True when the input itself is malformed rather than not applicable."""

    def __init__(self, message: str, *, usage: bool = False) -> None:
        super().__init__(message)
        self.usage = usage


def check_queue_name(name: str) -> str:
    """``name`` if it could name a queue (1 to 255 characters), else ``AdminError``."""
    if not name or len(name) > MAX_QUEUE_NAME:
        raise AdminError(f"a queue name has 1 to {MAX_QUEUE_NAME} characters; got {len(name)}",
                         usage=True)
    return name
