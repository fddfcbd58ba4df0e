"""How long each kind's jobs run here, as the pool measures them: the threshold past
which the job at the head of a child's pipe counts as overrunning, so that the jobs
queued behind it are recalled and given to other children (issue 28), and how many
jobs a kind with a heavy tail may hold in one child's pipe.

A kind of mostly short jobs with a rare long one (2 ms, one in 200 taking 3 s) gets a
deep pipe from its average run time; when the long one comes, the jobs queued behind it
would wait for it while other children idle. The head overruns once it has run
``OVERRUN_FACTOR`` times its kind's 95th percentile of the last ``WINDOW`` run times, and
never sooner than ``MIN_OVERRUN`` (a recall costs a round trip to the child and back). Not
at the 95th percentile itself, as the issue first put it: one run in twenty passes that
by definition, and for a kind of even run times (100 ms, give or take a few) both
children then crossed it together often enough to count as stuck, which sent their
claimed jobs back to the table and claimed them again for nothing. A kind not measured
yet overruns at ``MIN_OVERRUN``: nothing says it is long, and a recall is cheap.

A recall still comes ``MIN_OVERRUN`` late for every job queued behind the long head: with
a pipe of 8 and one job in 200 long, 3.5% of the short jobs waited at least that (the
benchmark's p99 was the recall's delay). So a kind whose recent runs include a tail
(runs of at least ``TAIL_FACTOR`` times its median and at least ``MIN_OVERRUN``) holds
at most ``pipe_cap`` jobs per pipe (never fewer than two): few enough that the jobs
that can sit behind one of its tail runs stay under ``TAIL_SHARE`` of its jobs. The rest
wait in the parent, where whichever child frees first takes them. Such a kind's wall
time is its tail's, so a pipe shorter than its queue's depth costs it next to nothing.
"""

from __future__ import annotations

from collections import deque

WINDOW = 200  # run times kept per kind
RECOMPUTE_EVERY = 20  # new samples between two sorts of the window (a sort: ~10 us)
MIN_OVERRUN = 0.05  # seconds: no recall sooner into a job
QUANTILE = 0.95
OVERRUN_FACTOR = 2.0  # a head overruns at this multiple of its kind's p95
TAIL_WINDOW = 1000  # runs per kind over which the tail's share is counted
TAIL_FACTOR = 10.0  # a run this many times its kind's median (and >= MIN_OVERRUN) is a tail
TAIL_SHARE = 0.005  # at most this share of a kind's jobs should queue behind a tail run


class RunTimes:
    """Per kind, the last ``WINDOW`` run times, their median and 95th percentile, and
    which of the last ``TAIL_WINDOW`` runs were tail runs."""

    __slots__ = ("_fresh", "_p50", "_p95", "_samples", "_tail", "_tails")

    def __init__(self) -> None:
        self._samples: dict[str, deque[float]] = {}
        self._fresh: dict[str, int] = {}  # samples since the percentile was computed
        self._p50: dict[str, float] = {}
        self._p95: dict[str, float] = {}
        self._tail: dict[str, deque[bool]] = {}  # per run, in order: was it a tail run
        self._tails: dict[str, int] = {}  # how many True in ``_tail``

    def ran(self, kind: str, seconds: float) -> None:
        """A job of ``kind`` ran ``seconds`` (start to answer, in the parent's view)."""
        samples = self._samples.get(kind)
        if samples is None:
            samples = self._samples[kind] = deque(maxlen=WINDOW)
            self._fresh[kind] = 0
            self._tail[kind] = deque(maxlen=TAIL_WINDOW)
            self._tails[kind] = 0
        # Judged against the median before this run; the first run of a kind has none
        # to be a tail of (a kind of 60 ms jobs would be capped for TAIL_WINDOW runs).
        median = self._p50.get(kind)
        tail = median is not None and seconds >= max(MIN_OVERRUN, TAIL_FACTOR * median)
        runs = self._tail[kind]
        if len(runs) == TAIL_WINDOW and runs[0]:
            self._tails[kind] -= 1
        runs.append(tail)
        if tail:
            self._tails[kind] += 1
        samples.append(seconds)
        fresh = self._fresh[kind] + 1
        if fresh >= RECOMPUTE_EVERY or kind not in self._p95:
            ordered = sorted(samples)
            last = len(ordered) - 1
            self._p50[kind] = ordered[min(last, int(0.5 * len(ordered)))]
            self._p95[kind] = ordered[min(last, int(QUANTILE * len(ordered)))]
            fresh = 0
        self._fresh[kind] = fresh

    def median(self, kind: str) -> float | None:
        """The kind's measured median run time, or None before its first."""
        return self._p50.get(kind)

    def p95(self, kind: str) -> float | None:
        """The kind's measured 95th percentile run time, or None before its first."""
        return self._p95.get(kind)

    def overrun_after(self, kind: str) -> float:
        """Seconds into a job of ``kind`` after which it overruns."""
        return max(MIN_OVERRUN, OVERRUN_FACTOR * self._p95.get(kind, 0.0))

    def pipe_cap(self, kind: str) -> int | None:
        """How many jobs one child's pipe may hold while it holds a job of ``kind``
        (the running one included), or None: no tail among its last ``TAIL_WINDOW``
        runs, the queue's depth alone decides. With ``k`` tail runs in ``n``, at most
        ``1 + TAIL_SHARE * n / k``: a pipe of ``c`` leaves about ``(c - 1) * k / n`` of
        the jobs behind a tail run, so that share stays at most ``TAIL_SHARE``. Never
        less than two: with a pipe of one the child waits for the parent after every
        job, a round trip that a loaded parent (waiting for a CPU) stretches to
        milliseconds, paid by every short job rather than by the few behind tail runs
        (the one job behind each tail run is recalled at its overrun)."""
        tails = self._tails.get(kind)
        if not tails:
            return None
        # The small epsilon: 0.005 * 200 / 1 is 1.0, not 0.999...
        return max(2, 1 + int(TAIL_SHARE * len(self._tail[kind]) / tails + 1e-9))
