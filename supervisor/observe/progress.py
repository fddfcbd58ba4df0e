"""Live progress of a ``--burst`` run and the words of its closing summary: done, failed
attempts, jobs discarded by reason, dependents cancelled because a dependency failed,
rate, ETA, and the jobs that wait: for their run_at (with when the next is due) or for
their dependencies (no due time: they run when those complete).

On a terminal one status line is redrawn in place on stderr; otherwise a log line is
written every few seconds, which is what a CI log or a container log wants.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TextIO

log = logging.getLogger("supervisor.progress")

# Ledger outcomes the summary names in words of their own; the rest appear by their key.
_WORDS = {"failed": "failed attempts", "interrupted": "interrupted (went back)"}


@dataclass(frozen=True, slots=True)
class Waits:
    """Jobs of the served queues that cannot run yet: ``timed`` wait for their run_at
    (scheduled, retrying), the next due in ``next_due_in`` seconds; ``held`` wait for
    their dependencies to complete."""

    timed: int = 0
    held: int = 0
    next_due_in: float | None = None


@dataclass(frozen=True, slots=True)
class Failures:
    """Jobs a run did not complete: discarded, by reason (``poison``, ``error``,
    ``timeout``, ...), and dependents cancelled because a dependency failed."""

    discarded: Mapping[str, int] = field(default_factory=dict)
    cancelled: int = 0

    @property
    def jobs(self) -> int:
        """How many jobs in all."""
        return sum(self.discarded.values()) + self.cancelled


def failure_words(failures: Failures) -> list[str]:
    """``2 jobs discarded [1 poison, 1 timeout]``, ``1 job cancelled [a dependency
    failed]``; nothing for what did not happen."""
    parts = []
    total = sum(failures.discarded.values())
    if total:
        reasons = ", ".join(f"{n} {reason}" for reason, n in
                            sorted(failures.discarded.items(), key=lambda kv: (-kv[1], kv[0]))
                            if n and reason)
        parts.append(f"{total} {_jobs(total)} discarded" + (f" [{reasons}]" if reasons else ""))
    if failures.cancelled:
        parts.append(f"{failures.cancelled} {_jobs(failures.cancelled)} cancelled "
                     "[a dependency failed]")
    return parts


def summary(finished: Mapping[str, int], failures: Failures, rescued: int = 0) -> str:
    """The closing summary: ``3 completed, 2 jobs discarded [1 poison, 1 timeout], 1 job
    cancelled [a dependency failed], 4 failed attempts`` ("idle" when nothing ran)."""
    parts = [f"{finished['completed']} completed"] if finished.get("completed") else []
    parts += failure_words(failures)
    for key, n in sorted(finished.items()):
        if n and key not in ("completed", "discarded"):
            parts.append(f"{n} {_WORDS.get(key, key)}")
    if rescued:
        parts.append(f"{rescued} rescued from dead supervisors")
    return ", ".join(parts) or "idle"


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
               waits: Waits | None = None, failures: Failures | None = None) -> None:
        """Show the current state; ``counts`` is the store's per-queue state counts
        (None while the database is away), ``waits`` what waits and for what, if known,
        ``failures`` the jobs discarded and cancelled so far."""
        self.next_update = now + self.interval
        line = self.render(now, finished, counts, waits, failures)
        if self.interactive:
            self.stream.write("\r\x1b[2K" + line)
            self.stream.flush()
            self._drawn = True
        else:
            log.info("%s", line)

    def render(self, now: float, finished: Mapping[str, int],
               counts: Mapping[str, Mapping[str, int]] | None,
               waits: Waits | None = None, failures: Failures | None = None) -> str:
        """The status line: ``1234 done, 2 failed attempts, 1 job discarded [1 error],
        410.5/s, 766 left, ETA 2s``. Jobs waiting for their run_at (scheduled, retrying)
        are counted apart, with when the next is due, and so are jobs waiting for their
        dependencies: no ETA is made up for either."""
        done = finished.get("completed", 0)
        failed = finished.get("failed", 0)
        if failures is None:
            # Reasons unknown: the count alone.
            failures = Failures({"": finished.get("discarded", 0)})
        elapsed = max(now - self.started, 1e-9)
        rate = (done + failed) / elapsed
        parts = [f"{done} done", f"{failed} failed attempts", *failure_words(failures),
                 f"{rate:.1f}/s"]
        if counts is not None:
            ready = sum(c.get("available", 0) + c.get("running", 0) for c in counts.values())
            parts.append(f"{ready} left")
            if rate > 0 and ready:
                parts.append(f"ETA {_duration(ready / rate)}")
            if waits is None:
                waits = Waits(timed=sum(c.get("scheduled", 0) + c.get("retryable", 0)
                                        for c in counts.values()))
        if waits is not None:
            if waits.timed:
                when = (f", the next due in {_duration(max(waits.next_due_in, 0.0))}"
                        if waits.next_due_in is not None else "")
                parts.append(f"{waits.timed} waiting for their run_at{when}")
            if waits.held:
                parts.append(f"{waits.held} waiting for their dependencies")
        return ", ".join(parts)

    def close(self, finished: Mapping[str, int]) -> None:
        """End the status line so later output starts on a fresh line."""
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()


def _jobs(n: int) -> str:
    return "job" if n == 1 else "jobs"


def _duration(seconds: float) -> str:
    seconds = int(seconds + 0.5)
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"
