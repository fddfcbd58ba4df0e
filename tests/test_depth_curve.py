"""The depth curve, pinned (issue 41): for a queue of even jobs of each run time, what a
claim takes for two idle children, how deep each child's pipe is and which rule of the
tuning table set each; and the pipe cap of a kind by its share of tail runs. A change to
``supervisor/tuning.py`` or to the depth's arithmetic that moves any of these shows
here, in review, as an edited row.

The curve is not smooth on purpose, and these rows say where it jumps and why: at
``floor_from`` (5 ms) a claim starts to take ``claim_covers`` (0.1 s) of work per child
(3 -> 20 jobs at a 2 ms claim latency: fewer claims and commits per job, issue 31); at
``long_job`` (0.1 s) the pipe holds the running job and the next (3 -> 2: the next one's
START rides on the answer's write); and at ``long_pipe_until`` (1 s) a job gets a pipe to
itself (2 -> 1: it never waits behind another while a child idles).
"""

from __future__ import annotations

import pytest

from supervisor.engine.allotment import claim_allowance
from supervisor.engine.depth import PrefetchDepth
from supervisor.pool import RunTimes

CHILDREN = 2

# run time (s), claim latency (s) -> claim for two idle children, depth rule, pipe, pipe rule
CURVE = [
    (0.00002, 0.002, 404, "claim_round_trips", 64, "max_pipeline"),
    (0.00002, 0.005, 512, "max_depth", 64, "max_pipeline"),
    (0.0005, 0.002, 20, "claim_round_trips", 10, "claim_round_trips"),
    (0.001, 0.002, 12, "claim_round_trips", 6, "claim_round_trips"),
    (0.001, 0.005, 24, "claim_round_trips", 12, "claim_round_trips"),
    (0.002, 0.002, 8, "claim_round_trips", 4, "claim_round_trips"),
    (0.0049, 0.002, 6, "claim_round_trips", 3, "claim_round_trips"),
    (0.005, 0.002, 40, "claim_covers", 20, "claim_covers"),
    (0.01, 0.002, 20, "claim_covers", 10, "claim_covers"),
    (0.02, 0.002, 10, "claim_covers", 5, "claim_covers"),
    (0.05, 0.002, 6, "claim_round_trips", 3, "claim_round_trips"),
    (0.0999, 0.002, 6, "claim_round_trips", 3, "claim_round_trips"),
    (0.1, 0.002, 4, "claim_round_trips", 2, "long_job_pipe"),
    (0.5, 0.002, 4, "claim_round_trips", 2, "long_job_pipe"),
    (0.999, 0.002, 4, "claim_round_trips", 2, "long_job_pipe"),
    (1.0, 0.002, 4, "claim_round_trips", 1, "long_pipe_until"),
    (2.0, 0.002, 4, "claim_round_trips", 1, "long_pipe_until"),
]


@pytest.mark.parametrize(("run_time", "latency", "claim", "depth_rule", "pipe", "pipe_rule"),
                         CURVE)
def test_the_depth_curve(run_time, latency, claim, depth_rule, pipe, pipe_rule):
    times = RunTimes()
    depth = PrefetchDepth(times)
    depth.latency = latency
    times.ran("k", "q", run_time)
    decided = depth.decide_depth("q")
    assert (claim_allowance(depth.depth("q", None), CHILDREN, 0), decided.rule) == (
        claim, depth_rule)
    piped = depth.decide_pipeline("q")
    assert (piped.value, piped.rule) == (pipe, pipe_rule)
    assert depth.pipeline("q", None) == pipe


def test_before_any_run_and_with_a_set_prefetch():
    depth = PrefetchDepth(RunTimes())
    assert depth.decide_depth("q").rule == depth.decide_pipeline("q").rule == "unmeasured"
    assert depth.depth("q", None) == depth.pipeline("q", None) == 1
    assert depth.depth("q", 8) == depth.pipeline("q", 8) == 8


# one tail run (3 s among 2 ms runs) in every N runs -> the pipe cap of the kind
TAIL_CAPS = [(10, 2), (20, 2), (100, 2), (200, 2), (400, 3), (1000, 6), (None, None)]


@pytest.mark.parametrize(("every", "cap"), TAIL_CAPS)
def test_the_pipe_cap_of_a_tailed_kind(every, cap):
    times = RunTimes()
    for i in range(1000):
        tail = every is not None and i % every == every - 1
        times.ran("k", "q", 3.0 if tail else 0.002)
    assert times.pipe_cap("k") == cap


@pytest.mark.parametrize(("typical", "cap"), [(0.15, 1), (0.099, 2), (0.002, 2)])
def test_a_tailed_kind_of_long_jobs_keeps_a_pipe_of_one(typical, cap):
    """Jobs of ``long_job`` or more get a pipe of two (the next START rides on the
    answer), except a kind with tail runs: the job behind a tail run would wait for its
    overrun, a second or more, to save a round trip of a millisecond."""
    times = RunTimes()
    for i in range(400):
        times.ran("k", "q", 3.0 if i % 20 == 19 else typical)
    assert times.pipe_cap("k") == cap
