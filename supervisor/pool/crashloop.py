"""Children that die before they are ready: whose fault it was, how long to wait before
forking again, and when to stop forking altogether (a crash loop halts the pool).

``Pool`` asks these when it reaps a child that never said READY: a death the code
caused (a boot error, an import error, a fault, a boot deadline) counts toward the
crash loop; one from outside (SIGKILL, the OOM killer) only spaces out the next fork.
"""

from __future__ import annotations

import os
import signal
from collections import deque

from shared.exitcodes import CHILD_BOOT_FAILURES


class RespawnBackoff:
    """Spacing between forks after children die before READY for a reason that is not
    their code's (killed from outside while booting): 0.1 s doubling to a cap, back to
    nothing once a child is ready. Such deaths never halt the pool."""

    def __init__(self, first: float = 0.1, cap: float = 5.0) -> None:
        self.first = first
        self.cap = cap
        self.delay = 0.0
        self.due: float | None = None  # no fork before this

    def died(self, now: float) -> None:
        """A child died while booting: wait longer before the next fork."""
        self.delay = self.first if self.delay == 0.0 else min(self.delay * 2, self.cap)
        self.due = now + self.delay

    def ready(self) -> None:
        """A child booted: fork freely again."""
        self.delay = 0.0
        self.due = None

    def waiting(self, now: float) -> bool:
        """True while forks must wait."""
        if self.due is not None and now >= self.due:
            self.due = None
        return self.due is not None


def boot_failure_of_code(status: int, said_boot_error: bool, killed_at_boot: bool) -> bool:
    """Whether a child that died before READY shows that the code cannot start: it said
    BOOT_ERROR, exited with a boot-failure code, crashed on a fault of its own (SIGSEGV
    in an extension's import, say), or the parent killed it for not being ready in time.
    A death by an outside signal (SIGKILL, SIGTERM, the OOM killer) is not the code's."""
    if said_boot_error or killed_at_boot:
        return True
    if os.WIFSIGNALED(status):
        return os.WTERMSIG(status) in _FAULTS
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) in CHILD_BOOT_FAILURES


_FAULTS = frozenset({signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE,
                     signal.SIGABRT, signal.SIGSYS})


class CrashLoop:
    """Counts children that died before READY. The pool halts when ``limit`` of them
    die in a row (a READY in between resets the streak) or within ``window`` seconds
    (a READY does not forgive those: children that alternate between booting and dying
    are a loop too)."""

    def __init__(self, limit: int, window: float) -> None:
        self.limit = limit
        self.window = window
        self.streak = 0
        self._times: deque[float] = deque()
        self.last_failure = ""

    def ready(self) -> None:
        """A child booted: the streak is over."""
        self.streak = 0

    def failed(self, now: float, description: str) -> bool:
        """Record a boot failure; True if the pool must halt."""
        self.streak += 1
        self.last_failure = description
        times = self._times
        times.append(now)
        while times and times[0] < now - self.window:
            times.popleft()
        return self.streak >= self.limit or len(times) >= self.limit

    def message(self) -> str:
        """Why the pool halted, in one line."""
        return (f"crash loop: {self.streak if self.streak >= self.limit else len(self._times)}"
                f" children died before they were ready; the last: {self.last_failure}")
