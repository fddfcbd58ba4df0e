"""Two batches in one queue over simulated time (issue 42): the real ``Scheduler`` on a
fake clock (``fairsim``), claims answered as the fair claim statement answers them. In a
queue set ``fair = "batch"`` a batch enqueued behind another starts within one job
length of its arrival and the two then share the children evenly; without the setting
it waits behind the first (which never ends here: the database always has more). Pure
logic: the database's part is in tests/test_fair_claim.py, real supervisors in
tests/test_fair_run.py and scripts/bench/fair_batches.py."""

import random

import pytest
from fairsim import Simulation

LENGTH = 0.005  # equal short jobs
ARRIVES = 0.5  # B is enqueued once A has run 0.5 s (100 job lengths)


def two_batches(fair: bool, prefetch: int | None, children: int = 4, rtt: float = 0.002):
    settings = {"prefetch": prefetch, **({"fair": "batch"} if fair else {})}
    sim = Simulation({"tiles": settings}, children, lambda queue, n: LENGTH, rtt=rtt,
                     batches={"tiles": {"A": 0.0, "B": ARRIVES}})
    # About the same number of claims in each case: a slow round trip, a longer run.
    sim.run(ARRIVES + (3.0 if rtt < 0.01 else 12.0))
    return sim.batch_starts["A"], sim.batch_starts["B"]


@pytest.mark.parametrize("prefetch, rtt", [
    (None, 0.002),  # auto depth (measured), a near database
    (None, 0.02),  # auto depth, a claim round trip of four job lengths
    (4, 0.002),  # a fixed depth
])
def test_a_fair_queue_starts_the_second_batch_within_a_job_length_then_shares(prefetch, rtt):
    a, b = two_batches(True, prefetch, rtt=rtt)
    assert b, "B never started"
    # The jobs already in the children's hands run first; with a queue of short jobs
    # the depth is about one claim round trip of work (engine/depth.py), so B's first
    # job waits less than a job length beyond the claim that takes it.
    assert b[0] - ARRIVES <= LENGTH + rtt + (prefetch or 1) * LENGTH, b[0] - ARRIVES
    both = [t for t in a if t >= b[0]]
    rate_a, rate_b = len(both), len(b)
    assert abs(rate_b - rate_a) <= 0.10 * rate_a, (rate_a, rate_b)


def test_without_the_setting_the_second_batch_waits_behind_the_first():
    _, b = two_batches(False, None)
    assert b == []


def test_one_batch_alone_keeps_every_child_busy_as_a_plain_queue_does():
    busy = {}
    for fair in (True, False):
        settings = {"fair": "batch"} if fair else {}
        # Lengths spread by +-20% (the same draws in both runs): with every job exactly
        # LENGTH the four children stay in lockstep, and which lockstep pattern the
        # simulation settles into (0.71 or 0.63 busy) turned on the phase of one early
        # claim, not on the claim's order.
        draws = random.Random(7)
        sim = Simulation({"tiles": settings}, 4,
                         lambda queue, n, draws=draws: LENGTH * (0.8 + 0.4 * draws.random()),
                         batches={"tiles": {"A": 0.0}})
        sim.run(3.0, measure_from=0.5)
        busy[fair] = sim.busy["tiles"] / (2.5 * 4)
    # As busy as the plain queue (the simulated pipe and claim round trip leave the same
    # idle time in both; the fair claim takes a batch's jobs as the plain one does).
    assert busy[True] == pytest.approx(busy[False], rel=0.02)
