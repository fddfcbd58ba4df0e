"""How long each kind's jobs run here, as the pool measures them: the threshold past
which the job at the head of a child's pipe counts as overrunning, so that the jobs
queued behind it are recalled and given to other children (issue 28).

A kind of mostly short jobs with a rare long one (2 ms, one in 200 taking 3 s) gets a
deep pipe from its average run time; when the long one comes, the jobs queued behind it
would wait for it while other children idle. The head overruns once it has run longer
than its kind's 95th percentile of the last ``WINDOW`` run times, and never sooner than
``MIN_OVERRUN`` (a recall costs a round trip to the child and back). A kind not measured
yet overruns at ``MIN_OVERRUN``: nothing says it is long, and a recall is cheap.
"""

from __future__ import annotations

from collections import deque

WINDOW = 200  # run times kept per kind
RECOMPUTE_EVERY = 20  # new samples between two sorts of the window (a sort: ~10 us)
MIN_OVERRUN = 0.05  # seconds: no recall sooner into a job
QUANTILE = 0.95


class RunTimes:
    """Per kind, the last ``WINDOW`` run times and their 95th percentile."""

    __slots__ = ("_fresh", "_p95", "_samples")

    def __init__(self) -> None:
        self._samples: dict[str, deque[float]] = {}
        self._fresh: dict[str, int] = {}  # samples since the percentile was computed
        self._p95: dict[str, float] = {}

    def ran(self, kind: str, seconds: float) -> None:
        """A job of ``kind`` ran ``seconds`` (start to answer, in the parent's view)."""
        samples = self._samples.get(kind)
        if samples is None:
            samples = self._samples[kind] = deque(maxlen=WINDOW)
            self._fresh[kind] = 0
        samples.append(seconds)
        fresh = self._fresh[kind] + 1
        if fresh >= RECOMPUTE_EVERY or kind not in self._p95:
            ordered = sorted(samples)
            self._p95[kind] = ordered[min(len(ordered) - 1, int(QUANTILE * len(ordered)))]
            fresh = 0
        self._fresh[kind] = fresh

    def p95(self, kind: str) -> float | None:
        """The kind's measured 95th percentile run time, or None before its first."""
        return self._p95.get(kind)

    def overrun_after(self, kind: str) -> float:
        """Seconds into a job of ``kind`` after which it overruns."""
        return max(MIN_OVERRUN, self._p95.get(kind, 0.0))
