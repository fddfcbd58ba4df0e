"""The overflow pool over simulated time: shares by weight, minimums, caps, fractions of
a child, fewer children than queues, rate limits and late arrivals. Pure logic: the real
``Scheduler`` on a fake clock (``fairsim``), no database, no processes.

Shares are of child-seconds (the pool is children); with jobs of equal length that is
also the share of completions.
"""

import itertools
import random

import pytest
from fairsim import Clock, Simulation

from supervisor.config import RunConfig
from supervisor.engine.allotment import (
    Deficits,
    apportion,
    pick_queue,
    shares,
)
from supervisor.engine.planner import Scheduler
from supervisor.queue_policy import QueuePolicy, validate
from supervisor.tuning import DEFAULT

CLAIM_HOLD = DEFAULT.claim_hold

EQUAL = {"a": 0.25, "b": 0.25, "c": 0.25, "d": 0.25, "e": 0.25}
UNEQUAL = {"a": 0.1, "b": 0.5, "c": 0.3, "d": 0.2, "e": 1.0}


def policies(settings: dict[str, dict]) -> dict[str, QueuePolicy]:
    return {name: QueuePolicy(name=name, **kw) for name, kw in settings.items()}


def fixed(lengths):
    return lambda queue, n: lengths[queue]


def random_lengths(seed):
    rnd, seen = random.Random(seed), {}
    return lambda queue, n: seen.setdefault((queue, n), rnd.uniform(0.05, 0.6))


def simulate(settings, children, length, until=80.0, warmup=10.0, **kw):
    sim = Simulation(settings, children, length, **kw)
    return sim, sim.run(until, warmup)


def assert_close(got, expected, rel=0.10):
    for queue, want in expected.items():
        assert abs(got[queue] - want) <= rel * want, (queue, got, expected)


# -- the static shares, worked by hand -------------------------------------------------

def test_minimum_first_then_overflow_by_weight_including_the_minimum_queue():
    p = policies({"a": {"weight": 3}, "b": {"weight": 1}, "c": {"weight": 1, "min_workers": 1}})
    # c: 1 guaranteed; the 3 left are shared 3:1:1 by all three -> 1.8, 0.6, 0.6 (+1).
    assert shares(p, {"a", "b", "c"}, 4) == pytest.approx({"a": 1.8, "b": 0.6, "c": 1.6})


def test_five_equal_queues_on_two_children_get_two_fifths_each():
    p = policies({q: {} for q in "abcde"})
    assert shares(p, set("abcde"), 2) == pytest.approx(dict.fromkeys("abcde", 0.4))


def test_a_capped_heavy_queue_leaves_the_rest_to_the_others_by_weight():
    p = policies({"a": {"weight": 10, "max_workers": 1}, "b": {"weight": 1},
                  "c": {"weight": 2}})
    assert shares(p, {"a", "b", "c"}, 4) == pytest.approx({"a": 1, "b": 1, "c": 2})
    # Everyone capped: the pool is not filled beyond the caps.
    p = policies({"a": {"max_workers": 1}, "b": {"max_workers": 2}})
    assert shares(p, {"a", "b"}, 8) == pytest.approx({"a": 1, "b": 2})


def test_minimums_that_oversubscribe_the_pool_are_scaled_alike():
    p = policies({"a": {"min_workers": 4}, "b": {"min_workers": 2}, "c": {"weight": 5}})
    assert shares(p, {"a", "b", "c"}, 4) == pytest.approx({"a": 8 / 3, "b": 4 / 3, "c": 0})


def test_a_minimum_above_the_cap_is_the_cap_and_queues_without_demand_get_nothing():
    p = policies({"a": {"min_workers": 5, "max_workers": 2}, "b": {"min_workers": 3}})
    assert shares(p, {"a", "b"}, 6) == pytest.approx({"a": 2, "b": 4})
    assert shares(p, {"b"}, 6) == pytest.approx({"a": 0, "b": 6})  # work-conserving
    assert shares(p, set(), 6) == {"a": 0, "b": 0}


def test_apportion_gives_spare_children_to_the_queues_owed_most():
    share = {"a": 1.8, "b": 0.6, "c": 1.6}
    plain = apportion(share, {})  # largest fractions: a's 0.8, then b's or c's 0.6
    assert plain["a"] == 2 and plain["b"] + plain["c"] == 2
    assert apportion(share, {"c": 2.0, "b": 1.0}) == {"a": 1, "b": 1, "c": 2}
    assert sum(apportion(share, {"b": 5.0}).values()) == 4


def test_deficits_are_zero_sum_bounded_and_forgotten_without_demand():
    d = Deficits(0.0)
    share = {"a": 1.5, "b": 0.5}
    d.advance(0.0, share, {"a": 2, "b": 0})
    d.advance(0.5, share, {"a": 2, "b": 0})
    assert d.owed == pytest.approx({"a": -0.25, "b": 0.25})
    d.advance(100.0, share, {"a": 2, "b": 0})
    assert d.owed["b"] == pytest.approx(d.horizon())  # bounded
    assert sum(d.owed.values()) == pytest.approx(0.0)
    d.advance(101.0, {"a": 2.0, "b": 0.0}, {"a": 2})
    assert "b" not in d.owed  # idle time is not banked


def test_a_free_child_waits_for_the_claim_of_the_queue_owed_most():
    targets, caps = {"a": 1, "b": 2}, {"a": 4, "b": 4}
    owed = {"a": 0.5, "b": -0.5}
    # b is below its target with a job waiting, but a is owed more and its claim is coming.
    assert pick_queue({"b": 1}, {"a": 0, "b": 1}, targets, caps, owed, coming={"a"}) is None
    assert pick_queue({"a": 1, "b": 1}, {"a": 0, "b": 1}, targets, caps, owed) == "a"
    # No lending to a queue at its share while a claim is coming; lending otherwise.
    assert pick_queue({"b": 3}, {"a": 0, "b": 2}, targets, caps, owed, coming={"a"}) is None
    assert pick_queue({"b": 3}, {"a": 0, "b": 2}, targets, caps, owed) == "b"


def test_validate_rejects_negative_aging_and_values_that_are_not_numbers():
    with pytest.raises(ValueError, match="aging must be >= 0"):
        validate(QueuePolicy(name="q", aging=-1))
    assert validate(QueuePolicy(name="q", aging=30)).aging == 30
    # A string from a config file is a one-line error, not a TypeError from a comparison.
    with pytest.raises(ValueError, match="aging must be a number"):
        validate(QueuePolicy(name="q", aging="soon"))
    with pytest.raises(ValueError, match="min_workers must be a whole number"):
        validate(QueuePolicy(name="q", min_workers=1.5))
    with pytest.raises(ValueError, match="weight must be a number"):
        validate(QueuePolicy(name="q", weight=float("nan")))


# -- over simulated time ---------------------------------------------------------------

NAMED = {
    "3:1:1 with a minimum on 4": ({"a": {"weight": 3}, "b": {"weight": 1},
                                   "c": {"weight": 1, "min_workers": 1}}, 4,
                                  {"a": 0.45, "b": 0.15, "c": 0.40}),
    "five equal on 2": ({q: {} for q in "abcde"}, 2, dict.fromkeys("abcde", 0.2)),
    "capped heavy": ({"a": {"weight": 10, "max_workers": 1}, "b": {}, "c": {}}, 4,
                     {"a": 0.25, "b": 0.375, "c": 0.375}),
}


@pytest.mark.parametrize("prefetch", [1, 4])
@pytest.mark.parametrize("lengths", ["equal", "unequal", "random"])
@pytest.mark.parametrize("case", sorted(NAMED))
def test_named_cases_meet_their_shares(case, lengths, prefetch):
    settings, children, expected = NAMED[case]
    settings = {q: dict(kw, prefetch=prefetch) for q, kw in settings.items()}
    length = {"equal": fixed(EQUAL), "unequal": fixed(UNEQUAL),
              "random": random_lengths(1)}[lengths]
    sim, got = simulate(settings, children, length)
    assert_close(got, expected)
    for queue, cap in ((q, kw.get("max_workers")) for q, kw in settings.items()):
        if cap is not None:
            assert sim.max_running[queue] <= cap


GRID_WEIGHTS = [(1, 1), (3, 1), (3, 1, 1), (5, 2, 1), (1, 1, 1, 1, 1), (10, 1, 1, 1)]
GRID = [
    (weights, children, variant)
    for weights, children, variant in itertools.product(
        GRID_WEIGHTS, [1, 2, 3, 4, 8], ["plain", "minimum", "cap"])
]


@pytest.mark.slow  # 90 cases, about 30 s in all on this machine
@pytest.mark.parametrize(("weights", "children", "variant"), GRID)
def test_grid_of_weights_minimums_caps_and_pool_sizes(weights, children, variant):
    names = "abcde"[:len(weights)]
    settings = {q: {"weight": w} for q, w in zip(names, weights, strict=True)}
    if variant == "minimum":  # the lightest queue is guaranteed a child
        settings[names[-1]]["min_workers"] = 1
    if variant == "cap":  # the heaviest queue may hold at most half the pool
        settings["a"]["max_workers"] = max(1, children // 2)
    # The expectation is the static arithmetic worked by hand in the tests above; what
    # this checks is that the dispatcher delivers it over time.
    fluid = shares(policies(settings), set(names), children)
    expected = {q: s / sum(fluid.values()) for q, s in fluid.items()}
    for lengths in (fixed(EQUAL), random_lengths(children)):
        _, got = simulate(settings, children, lengths, until=60.0, warmup=10.0)
        assert_close(got, expected)


def test_no_queue_waits_for_another_to_drain():
    """Every queue with demand starts jobs all along, at its own pace."""
    settings, children, expected = NAMED["3:1:1 with a minimum on 4"]
    sim, _ = simulate(settings, children, fixed(EQUAL), until=60.0)
    for queue, starts in sim.starts.items():
        # b's share is 0.6 child: one 0.25 s job every 0.42 s on average.
        pace = 0.25 / (expected[queue] * children)
        gaps = [b - a for a, b in itertools.pairwise(starts)]
        assert max(gaps) <= 3 * max(pace, 0.25), (queue, max(gaps))


def test_a_queue_that_gets_work_later_starts_at_once_and_banks_no_idle_time():
    settings = {"a": {"weight": 1}, "b": {"weight": 1}}
    sim, _ = simulate(settings, 2, fixed(EQUAL), until=10.0, warmup=0.0, arrives={"b": 5.0})
    assert sim.starts["b"][0] <= 5.0 + 0.25 + 0.01  # as soon as one of a's jobs ends
    sim, got = simulate(settings, 2, fixed(EQUAL), until=100.0, warmup=60.0,
                        arrives={"b": 50.0})
    assert_close(got, {"a": 0.5, "b": 0.5})


def test_a_rate_limited_queue_leaves_its_unused_share_to_the_others():
    settings = {"a": {"weight": 3, "max_rate": 2.0}, "b": {"weight": 1}}
    sim, _ = simulate(settings, 4, fixed(EQUAL), until=100.0, warmup=0.0)
    assert sim.started["a"] <= 2.0 * 100 + 1  # rate, plus the bucket's one token
    assert sim.started["a"] >= 2.0 * 100 * 0.95
    assert sum(sim.busy.values()) >= 0.95 * 4 * 100  # the pool stays busy


def test_a_child_kept_for_a_claim_is_lent_once_the_claim_is_late():
    """If the claim a free child waits for does not come (database away), the child
    goes to a queue at its share after CLAIM_HOLD, and the loop is woken for it."""
    clock = Clock()
    config = RunConfig(children=2, queue_policies=policies({"a": {}, "b": {}}))
    scheduler = Scheduler(config, ["a", "b"], 0.0, clock=clock)
    scheduler.observed({"a", "b"})
    # a holds nothing and is owed its child; b holds one and has one more claimed.
    assert scheduler.next_queue(2, {"b": 1}, {"b": 1}) is None
    assert scheduler.next_token_at(0.0) == pytest.approx(CLAIM_HOLD)
    clock.now = CLAIM_HOLD / 2
    assert scheduler.next_queue(2, {"b": 1}, {"b": 1}) is None
    clock.now = CLAIM_HOLD + 0.01
    assert scheduler.next_queue(2, {"b": 1}, {"b": 1}) == "b"
