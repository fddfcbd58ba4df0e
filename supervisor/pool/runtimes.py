"""How long jobs run here: the one run-time estimator of a supervisor (issue 41). Its
numbers are fields of the tuning table (``supervisor.tuning``).

The pool feeds it once per answer (a job done or failed; an expired one never ran), with
the larger of the parent's reading (START to answer) and the child's own measure of its
handler: the parent's is near zero whenever it reads both in one turn, which a loaded
machine makes common (issue 31). Everything that asks how long a job runs reads it:

- per kind, the last ``run_window`` run times, their median and 95th percentile (nearest
  rank, the rule of the table's ``percentile_disc`` in ``db.kind_run_times``): when the
  head of a child's pipe overruns and the jobs queued behind it are recalled (issue 28),
  whether a lone queued job is worth moving to an idle child, and whether a running job
  can finish within a drain's grace (issue 47, with the table's figure for kinds too few
  of which completed here);
- per kind, which of the last ``tail_window`` runs were tail runs: how many jobs a kind
  with a heavy tail may hold in one pipe;
- per queue, a smoothed average and a typical run time (each sample cut to ``tail_clip``
  times it): what the prefetch depth (``engine.depth``) is sized by.

A kind of mostly short jobs with a rare long one (2 ms, one in 200 taking 3 s) gets a
deep pipe from its average run time; when the long one comes, the jobs queued behind it
would wait for it while other children idle. The head overruns once it has run
``overrun_factor`` times its kind's 95th percentile, and never sooner than
``min_overrun`` (a recall costs a round trip to the child and back). Not at the 95th
percentile itself, as issue 28 first put it: one run in twenty passes that by
definition, and for a kind of even run times (100 ms, give or take a few) both children
then crossed it together often enough to count as stuck, which sent their claimed jobs
back to the table and claimed them again for nothing. A kind not measured yet overruns
at ``min_overrun``: nothing says it is long, and a recall is cheap.

A recall still comes ``min_overrun`` late for every job queued behind the long head: with
a pipe of 8 and one job in 200 long, 3.5% of the short jobs waited at least that (the
benchmark's p99 was the recall's delay). So a kind whose recent runs include a tail
(runs of at least ``tail_factor`` times its median and at least ``min_overrun``) holds
at most ``pipe_cap`` jobs per pipe (never fewer than two, but one for a kind of long
jobs, whose median is ``long_job`` or more): few enough that the jobs
that can sit behind one of its tail runs stay under ``tail_share`` of its jobs. The rest
wait in the parent, where whichever child frees first takes them. Such a kind's wall
time is its tail's, so a pipe shorter than its queue's depth costs it next to nothing.

The percentiles are sorted again every ``sort_every`` runs (a sort of the window
costs ~10 us), and at every run up to that many: every reader sees the same figures,
the overrun threshold and a drain's notices alike.
"""

from __future__ import annotations

import math
import statistics
from collections import deque

from shared.usage import ran_at_least
from supervisor.pool.outcomes import JobDone, JobFailed
from supervisor.tuning import DEFAULT, Tuning

_ROUNDING = 1e-9  # a float's error, not a rule


def nearest_rank(ordered: list[float], quantile: float) -> float:
    """The ``quantile`` of ``ordered`` (sorted, not empty) by nearest rank: the smallest
    value at least that share of the samples do not exceed."""
    return ordered[max(0, math.ceil(quantile * len(ordered)) - 1)]


def ran_for(answer: JobDone | JobFailed) -> float:
    """How long the job ran, for the run-time estimates (``shared.usage.ran_at_least``).
    The larger of the parent's reading and the child's measure, not the child's alone:
    that would also move jobs near ``long_job`` into the pipe, where the recall of issue
    28 takes them back whenever the head runs late."""
    return ran_at_least(answer.duration, answer.usage)


class _Kind:
    """One kind's recent runs and the figures computed from them."""

    __slots__ = ("fresh", "p50", "p95", "queues", "samples", "tail", "tail_from", "tails")

    def __init__(self, tuning: Tuning) -> None:
        self.samples: deque[float] = deque(maxlen=tuning.run_window)
        self.fresh = 0  # samples since the percentiles were computed
        self.p50: float | None = None
        self.p95: float | None = None
        # A run this long is a tail run: none before the first median.
        self.tail_from = math.inf
        # Per run, in order: was it a tail run.
        self.tail: deque[bool] = deque(maxlen=tuning.tail_window)
        self.tails = 0  # how many True in ``tail``
        self.queues: set[str] = set()  # the queues its jobs ran in here

    def sort(self, tuning: Tuning) -> None:
        ordered = sorted(self.samples)
        self.p50 = median = statistics.median_low(ordered)  # the nearest rank's median
        self.p95 = nearest_rank(ordered, tuning.percentile)
        self.tail_from = max(tuning.min_overrun, tuning.tail_factor * median)
        self.fresh = 0


class RunTimes:
    """Per kind, the last ``run_window`` run times, their median and 95th percentile, and
    which of the last ``tail_window`` runs were tail runs; per queue, the smoothed and
    the typical run time."""

    __slots__ = ("_kinds", "_stored", "average", "tuning", "typical")

    def __init__(self, tuning: Tuning = DEFAULT) -> None:
        self.tuning = tuning
        self._kinds: dict[str, _Kind] = {}
        # The table's p95 of kinds too few of which completed here (issue 47).
        self._stored: dict[str, float] = {}
        self.average: dict[str, float] = {}  # per queue, smoothed
        # The same average with each sample cut to tail_clip times it: what the queue's
        # jobs usually take, which its rare long runs do not pull up.
        self.typical: dict[str, float] = {}

    def ran(self, kind: str, queue: str, seconds: float) -> None:
        """A job of ``kind`` in ``queue`` ran ``seconds``."""
        # Once per job in the parent: few lookups, no allocation.
        tuning = self.tuning
        runs = self._kinds.get(kind)
        if runs is None:
            runs = self._kinds[kind] = _Kind(tuning)
        if queue not in runs.queues:
            runs.queues.add(queue)
        # Judged against the median before this run; the first run of a kind has none
        # to be a tail of (a kind of 60 ms jobs would be capped for tail_window runs).
        tail = seconds >= runs.tail_from
        history = runs.tail
        if len(history) == history.maxlen and history[0]:
            runs.tails -= 1
        history.append(tail)
        if tail:
            runs.tails += 1
        samples = runs.samples
        samples.append(seconds)
        runs.fresh += 1
        if runs.fresh >= tuning.sort_every or len(samples) <= tuning.sort_every:
            runs.sort(tuning)
        smoothing = tuning.smoothing
        average = self.average
        old = average.get(queue)
        average[queue] = seconds if old is None else old + smoothing * (seconds - old)
        typical = self.typical
        usual = typical.get(queue)
        typical[queue] = seconds if usual is None else usual + smoothing * (
            min(seconds, tuning.tail_clip * usual) - usual)

    # -- per kind --------------------------------------------------------------------
    def median(self, kind: str) -> float | None:
        """The kind's measured median run time, or None before its first."""
        runs = self._kinds.get(kind)
        return None if runs is None else runs.p50

    def p95(self, kind: str) -> float | None:
        """The 95th percentile of ``kind``'s recent run times once ``drain_min_samples``
        completed here; until then the table's (``adopt``), else None."""
        runs = self._kinds.get(kind)
        if runs is None or len(runs.samples) < self.tuning.drain_min_samples:
            return self._stored.get(kind)
        return runs.p95

    def unknown(self, kinds: set[str]) -> set[str]:
        """Those of ``kinds`` whose run time this supervisor cannot say yet."""
        return {kind for kind in kinds if self.p95(kind) is None}

    def adopt(self, stored: dict[str, float]) -> None:
        """Take the table's p95 for kinds too few of which completed here; the run
        times measured here take over once there are ``drain_min_samples`` of them."""
        self._stored.update(stored)

    def overrun_after(self, kind: str) -> float:
        """Seconds into a job of ``kind`` after which it overruns (from its first run:
        a recall is cheap)."""
        runs = self._kinds.get(kind)
        p95 = 0.0 if runs is None or runs.p95 is None else runs.p95
        return max(self.tuning.min_overrun, self.tuning.overrun_factor * p95)

    def pipe_cap(self, kind: str) -> int | None:
        """How many jobs one child's pipe may hold while it holds a job of ``kind``
        (the running one included), or None: no tail among its last ``tail_window``
        runs, the queue's depth alone decides. With ``k`` tail runs in ``n``, at most
        ``1 + tail_share * n / k``: a pipe of ``c`` leaves about ``(c - 1) * k / n`` of
        the jobs behind a tail run, so that share stays at most ``tail_share``. Never
        less than two: with a pipe of one the child waits for the parent after every
        job, a round trip that a loaded parent (waiting for a CPU) stretches to
        milliseconds, paid by every short job rather than by the few behind tail runs
        (the one job behind each tail run is recalled at its overrun). One for a kind
        whose median is ``long_job`` or more: there the round trip is little beside the
        job, and the wait for a tail run's overrun is not."""
        runs = self._kinds.get(kind)
        if runs is None or not runs.tails:
            return None
        tuning = self.tuning
        if runs.p50 is not None and runs.p50 >= tuning.long_job:
            # Measured with 150 ms jobs and one 2 s run in 20 (heavy_tail.py): the
            # short jobs' p99 wait 600 ms with a pipe of two, 300 ms with one.
            return 1
        behind = tuning.tail_share * len(runs.tail) / runs.tails
        # The small epsilon: 0.005 * 200 / 1 is 1.0, not 0.999...
        return max(tuning.min_tail_pipe, 1 + int(behind + _ROUNDING))

    # -- per queue -------------------------------------------------------------------
    def queue_average(self, queue: str) -> float | None:
        """The queue's smoothed run time, or None before its first job ended."""
        return self.average.get(queue)

    def kinds_of(self, queue: str) -> list[str]:
        """The kinds of which a job of ``queue`` ran here, sorted."""
        return sorted(kind for kind, runs in self._kinds.items() if queue in runs.queues)

    def queue_typical(self, queue: str) -> float | None:
        """The queue's typical run time (rare long runs cut), or None before its first."""
        return self.typical.get(queue)
