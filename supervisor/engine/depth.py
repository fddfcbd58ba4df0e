"""How many jobs to hold per child when a queue's prefetch is "auto" (the default).
Its numbers are fields of the tuning table (``supervisor.tuning``).

A child must never wait for the database between two jobs, and no job should be held
longer than that needs. So each queue holds, per allotted child, about two claim round
trips of its own work plus the job in hand, and one spare for jobs shorter than
``long_job``: ``ceil(2 * claim_latency / run_time) + 2``. Both are measured as this
supervisor runs: run times as smoothed averages (the queue view of ``pool.RunTimes``),
the claim latency as a high-water mark that rises with any slow claim at once and comes
down slowly, because a child starves on the slow claims, not on the average one
(measured on 2 shared cores with 5 ms jobs: depths from the average latency left the
children idle about a tenth of the time). No-op jobs end up with a few hundred per
child, 5 ms jobs with a handful, long jobs with two. Until a queue's first jobs have
finished its run time is unknown and it holds one per child, which is what a long-job
queue wants from its first claim on.

Jobs of ``floor_from`` (5 ms) up to ``long_job`` are held at least ``claim_covers`` (0.1
s) of work per child (issue 31): from the latency alone 20 ms jobs got three per child,
so claims of three jobs each, and the claims' statements and commits were a third of the
database's and the parent's work per job. With the floor, measured with 20 ms jobs on 2
cores: 425-431 commits for 1,000 jobs against 281-282, the run's backends' CPU 0.33-0.34
against 0.21-0.23 ms a job, the parent's 0.36-0.37 against 0.29-0.31 ms. A batch's last
jobs no longer wait in one pipe while another child idles: the pool gives an idle child
the last half of the fullest pipe (``Pool.rebalance``). Shorter jobs keep the latency's
depth: a floor of 0.1 s would hold 50 jobs of 2 ms per child, and the wait from claim to
start is what such queues are tuned for. Whether a queue's jobs are that short is judged
on their typical run time, an average of samples cut to ``tail_clip`` times it
(``pool.runtimes``): the plain average of a queue of 2 ms jobs with a rare 3 s one jumps
to 0.6 s at the long run and then comes down through 5-100 ms for a dozen jobs, and a
floor taken from it claimed up to 20 of them per child each time (the short jobs' p99
wait in `heavy_tail.py` was 65 ms, against 9 ms in the same stream without long jobs).

What a queue holds for a child waits in that child's own pipe (``pipeline``, at most
``max_pipeline``), so the child runs back to back whenever the parent is late, not only
while it turns its loop: with both children busy on 2 shared cores the parent itself
waits for a CPU for milliseconds at a time. Measured with 5 ms jobs: a pipe of one claim
round trip (2 or 3 jobs) took 5.7-9.6 s where the whole window took 5.0-5.9 s.

Jobs of ``long_job`` (0.1 s) up to ``long_pipe_until`` (1 s) have a pipe of two
(``long_job_pipe``): the next job waits behind the running one, so its START goes in the
same write as the answer and the child never waits for the parent between the two.
With a pipe of one each 200 ms job cost the parent a second wake and its child a gap of
1.0-1.1 ms between two jobs (median, ``job_timeline.py``), against 0.4-0.6 ms with two.
The queued job waits for the running one, typically under a second, and is recalled at
that one's overrun (``overrun_factor`` times its kind's p95) or given to an idle child at
the queue's end (``Pool.rebalance``); a kind of such jobs with tail runs keeps a pipe of one
(``RunTimes.pipe_cap``), so no job waits behind its tail. From ``long_pipe_until`` on a
job gets a child to itself: it never waits behind another while a child is idle, and
what the pipe would save it is nothing to it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from supervisor.pool import RunTimes
from supervisor.tuning import DEFAULT, Tuning


@dataclass(slots=True)  # not frozen: made at every claim and dispatch, frozen costs more
class Decided:
    """A number the depth chose, and the rule that chose it: a field of the tuning
    table, ``prefetch`` (the queue's own setting) or ``unmeasured`` (no run time yet)."""

    value: int
    rule: str


class PrefetchDepth:
    """The depths each queue's measured run time (``RunTimes``, its queue view) and the
    claim latency call for, by the rules of the tuning table."""

    def __init__(self, run_times: RunTimes, tuning: Tuning = DEFAULT) -> None:
        self.run_times = run_times  # fed by the pool at each answer; read here
        self.tuning = tuning
        self.latency = tuning.first_latency  # high-water mark of the claim's round trip

    def claimed(self, seconds: float) -> None:
        """A claim took ``seconds`` from sending to its answer."""
        if seconds >= self.latency:
            self.latency = seconds
        else:
            self.latency += self.tuning.latency_decay * (seconds - self.latency)

    def depth(self, queue: str, configured: int | None) -> int:
        """Jobs to hold per allotted child: ``configured`` when the queue sets one."""
        if configured is not None:
            return configured
        return self.decide_depth(queue).value

    def decide_depth(self, queue: str) -> Decided:
        """The auto depth of ``queue`` and the rule that set it."""
        run_time = self.run_times.queue_average(queue)
        if run_time is None:
            return Decided(1, "unmeasured")
        tuning = self.tuning
        short = run_time < tuning.long_job
        spare = tuning.short_job_spare if short else 0  # a long job's next claim has time
        need = math.ceil(tuning.claim_round_trips * self.latency
                         / max(run_time, tuning.shortest_run_time)) + 1 + spare
        rule = "claim_round_trips"
        typical = self.run_times.queue_typical(queue)
        usual = run_time if typical is None else typical
        if usual >= tuning.floor_from and short:
            floor = math.ceil(tuning.claim_covers / max(run_time, usual))
            if floor > need:
                need, rule = floor, "claim_covers"
        if need > tuning.max_depth:
            return Decided(tuning.max_depth, "max_depth")
        return Decided(need, rule)

    def pipeline(self, queue: str, configured: int | None) -> int:
        """Jobs of ``queue`` one child may hold in its pipe, the running one included:
        ``configured`` when the queue sets a prefetch, two for jobs of 0.1-1 s and one
        for longer ones (and until a run time was measured), else the queue's whole
        depth per child."""
        if configured is not None:
            return max(1, configured)
        return self.decide_pipeline(queue).value

    def decide_pipeline(self, queue: str) -> Decided:
        """The auto pipe of ``queue`` and the rule that set it."""
        run_time = self.run_times.queue_average(queue)
        if run_time is None:
            return Decided(1, "unmeasured")
        tuning = self.tuning
        if run_time >= tuning.long_pipe_until:
            return Decided(1, "long_pipe_until")
        depth = self.decide_depth(queue)
        if run_time >= tuning.long_job:
            return Decided(min(tuning.long_job_pipe, depth.value), "long_job_pipe")
        if depth.value > tuning.max_pipeline:
            return Decided(tuning.max_pipeline, "max_pipeline")
        return depth
