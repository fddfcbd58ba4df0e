"""Live progress of a ``--burst`` run: done, failed attempts and discarded jobs, rate,
ETA, and the jobs waiting for their run_at.

On a terminal one status line is redrawn in place on stderr; otherwise a log line is
written every few seconds, which is what a CI log or a container log wants.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from typing import TextIO

log = logging.getLogger("supervisor.progress")


class BurstProgress:
    """Tracks finished counts over time and shows them."""

    def __init__(self, stream: TextIO | None = None, *, now: float,
                 interactive: bool | None = None, interval: float | None = None) -> None:
        self.stream = stream or sys.stderr
        self.interactive = self.stream.isatty() if interactive is None else interactive
        self.interval = interval if interval is not None else (0.5 if self.interactive else 5.0)
        self.started = now
        self.next_update = now + self.interval
        self._drawn = False

    def update(self, now: float, finished: Mapping[str, int],
               counts: Mapping[str, Mapping[str, int]] | None,
               next_due: float | None = None) -> None:
        """Show the current state; ``counts`` is the store's per-queue state counts
        (None while the database is away), ``next_due`` when (on ``now``'s clock) the
        next scheduled or retrying job is due, if known."""
        self.next_update = now + self.interval
        line = self.render(now, finished, counts, next_due)
        if self.interactive:
            self.stream.write("\r\x1b[2K" + line)
            self.stream.flush()
            self._drawn = True
        else:
            log.info("%s", line)

    def render(self, now: float, finished: Mapping[str, int],
               counts: Mapping[str, Mapping[str, int]] | None,
               next_due: float | None = None) -> str:
        """The status line: ``1234 done, 2 failed attempts (1 discarded), 410.5/s, 766
        left, ETA 2s``. Jobs waiting for their run_at (scheduled, retrying) are counted
        apart, with when the next is due: no ETA is made up for them."""
        done = finished.get("completed", 0)
        failed = finished.get("failed", 0)
        discarded = finished.get("discarded", 0)
        elapsed = max(now - self.started, 1e-9)
        rate = (done + failed) / elapsed
        parts = [f"{done} done", f"{failed} failed attempts ({discarded} discarded)",
                 f"{rate:.1f}/s"]
        if counts is not None:
            ready = sum(c.get("available", 0) + c.get("running", 0) for c in counts.values())
            waiting = sum(c.get("scheduled", 0) + c.get("retryable", 0)
                          for c in counts.values())
            parts.append(f"{ready} left")
            if rate > 0 and ready:
                parts.append(f"ETA {_duration(ready / rate)}")
            if waiting:
                when = (f", the next due in {_duration(max(next_due - now, 0))}"
                        if next_due is not None else "")
                parts.append(f"{waiting} waiting for their run_at{when}")
        return ", ".join(parts)

    def close(self, finished: Mapping[str, int]) -> None:
        """End the status line so later output starts on a fresh line."""
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()


def _duration(seconds: float) -> str:
    seconds = int(seconds + 0.5)
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"
