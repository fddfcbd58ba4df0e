"""A failure log that says the same thing at most once in a while.

A statement that fails every round (the loop's, or the history writer's) must not flood
the log: each operation's failure is logged, then not again for ``every`` seconds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from shared.db import first_line

ERROR_LOG_EVERY = 30.0  # the same failing operation is logged at most this often


class ThrottledLog:
    """Logs ``what failed`` at ``level``, at most once per ``every`` seconds for each
    ``what`` (by ``clock``), saying that ``retry`` follows."""

    def __init__(self, log: logging.Logger, level: int, clock: Callable[[], float], *,
                 retry: str = "will try again", every: float = ERROR_LOG_EVERY) -> None:
        self.log = log
        self.level = level
        self.clock = clock
        self.retry = retry
        self.every = every
        self._logged: dict[str, float] = {}

    def failed(self, what: str, exc: BaseException) -> None:
        """Log that ``what`` failed with ``exc``, unless it was logged under ``every``
        seconds ago."""
        now = self.clock()
        if now - self._logged.get(what, -self.every) >= self.every:
            self._logged[what] = now
            self.log.log(self.level, "%s failed, %s: %s: %s", what, self.retry,
                         type(exc).__name__, first_line(exc))
