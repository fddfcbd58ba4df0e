"""Measured run times per kind, and their 95th percentile (issue 28): what a drain asks
to judge whether a running job can finish within its grace.

Each kind keeps its last ``WINDOW`` completed run times; the percentile is computed only
when asked (at a drain's start), so the per-job cost is one append to a bounded deque.
"""

from __future__ import annotations

import math
from collections import deque

WINDOW = 200  # run times kept per kind: enough for a stable 95th percentile
MIN_SAMPLES = 3  # fewer than this and the kind's run time counts as unknown


class RunTimes:
    """The last run times of each kind that completed here."""

    def __init__(self) -> None:
        self._seen: dict[str, deque[float]] = {}
        # The table's p95 of kinds too few of which completed here (issue 47).
        self._stored: dict[str, float] = {}

    def unknown(self, kinds: set[str]) -> set[str]:
        """Those of ``kinds`` whose run time this supervisor cannot say yet."""
        return {kind for kind in kinds if self.p95(kind) is None}

    def adopt(self, stored: dict[str, float]) -> None:
        """Take the table's p95 for kinds too few of which completed here; the run
        times measured here take over once there are ``MIN_SAMPLES`` of them."""
        self._stored.update(stored)

    def ran(self, kind: str, seconds: float) -> None:
        """A job of ``kind`` completed after ``seconds`` in its child."""
        seen = self._seen.get(kind)
        if seen is None:
            seen = self._seen[kind] = deque(maxlen=WINDOW)
        seen.append(seconds)

    def p95(self, kind: str) -> float | None:
        """The 95th percentile of ``kind``'s recent run times (nearest rank); if too few
        completed here to say, the table's (``adopt``), else None."""
        seen = self._seen.get(kind)
        if seen is None or len(seen) < MIN_SAMPLES:
            return self._stored.get(kind)
        ordered = sorted(seen)
        return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]
