"""Handlers for trying the image: ``supervisor run --app example_jobs``.

Enqueue from the host with ``supervisor enqueue example_square --args '{"n": 12}'``.
"""

import time

from workers import job


@job
def example_square(n: int) -> int:
    """Return ``n`` squared."""
    return n * n


@job
def example_sleep(seconds: float) -> float:
    """Sleep ``seconds`` (to watch a drain: stop the container while one runs)."""
    time.sleep(seconds)
    return seconds
