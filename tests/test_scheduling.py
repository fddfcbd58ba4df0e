"""Unit tests of the scheduling arithmetic: token bucket, weighted allotment, dispatch
order. Pure logic, no database, no processes."""

from collections import Counter

import pytest

from supervisor.engine.allotment import allot, claim_allowance, pick_queue
from supervisor.engine.ratelimit import TokenBucket
from supervisor.queue_policy import QueuePolicy, validate


def test_bucket_starts_full_and_limits_to_rate():
    bucket = TokenBucket(rate=20, burst=5, now=0.0)
    assert bucket.take(100, now=0.0) == 5
    assert bucket.take(100, now=0.0) == 0
    assert bucket.take(100, now=0.2) == 4  # 0.2 s at 20/s
    assert bucket.take(100, now=5.0) == 5  # never more than the burst at once
    started = 0
    t = 5.0
    while t < 15.0:
        t += 0.01
        started += bucket.take(100, now=t)
    # 10 s at 20/s from an empty bucket: 200, never more.
    assert 199 <= started <= 200


def test_bucket_refund_and_next_token():
    bucket = TokenBucket(rate=2, burst=2, now=0.0)
    assert bucket.take(2, now=0.0) == 2
    assert bucket.next_token_at(0.0) == pytest.approx(0.5)
    bucket.refund(1)
    assert bucket.available(0.0) == 1
    bucket.refund(10)
    assert bucket.available(0.0) == 2  # never above capacity


def test_bucket_rejects_bad_rate():
    with pytest.raises(ValueError):
        TokenBucket(rate=0)


def policies(**kw):
    return {name: QueuePolicy(name=name, **settings) for name, settings in kw.items()}


def test_weights_share_the_pool():
    p = policies(a={"weight": 3}, b={"weight": 1})
    assert allot(p, {"a", "b"}, 8) == {"a": 6, "b": 2}
    assert allot(p, {"a", "b"}, 4) == {"a": 3, "b": 1}


def test_work_conserving_when_one_queue_is_idle():
    p = policies(a={"weight": 3, "min_workers": 2}, b={"weight": 1, "min_workers": 2})
    assert allot(p, {"b"}, 8) == {"a": 0, "b": 8}


def test_minimums_then_overflow_by_weight():
    p = policies(a={"weight": 1, "min_workers": 3}, b={"weight": 1})
    # a gets 3 first, the overflow of 3 is shared 1:1 (1.5 each, remainder to a by name).
    t = allot(p, {"a", "b"}, 6)
    assert t["a"] >= 3
    assert t["a"] + t["b"] == 6


def test_caps_respected_and_rest_flows_to_others():
    p = policies(a={"weight": 10, "max_workers": 2}, b={"weight": 1})
    assert allot(p, {"a", "b"}, 8) == {"a": 2, "b": 6}
    # nobody else wants the rest: it stays free rather than breaking a's cap
    assert allot(p, {"a"}, 8) == {"a": 2, "b": 0}


def test_allotment_never_exceeds_pool():
    p = policies(a={"min_workers": 5}, b={"min_workers": 5}, c={"weight": 2})
    t = allot(p, {"a", "b", "c"}, 7)
    assert sum(t.values()) == 7
    # Minimums that oversubscribe the pool are scaled alike (3.5 each), not served in
    # name order; the half child goes to whichever is owed it (see test_fairshare).
    assert sorted([t["a"], t["b"]]) == [3, 4] and t["c"] == 0


def test_claim_allowance_uses_prefetch():
    p = QueuePolicy(name="q", prefetch=4)
    assert claim_allowance(p.prefetch, target=2, outstanding=3) == 5
    assert claim_allowance(p.prefetch, target=2, outstanding=9) == 0


def test_pick_queue_converges_on_weights():
    p = policies(a={"weight": 3}, b={"weight": 1})
    targets = allot(p, {"a", "b"}, 4)
    caps = {"a": 4, "b": 4}
    running = Counter()
    for _ in range(4):
        q = pick_queue({"a": 10, "b": 10}, running, targets, caps)
        running[q] += 1
    assert running == {"a": 3, "b": 1}


def test_pick_queue_never_breaks_a_cap():
    assert pick_queue({"a": 5}, {"a": 2}, {"a": 2}, {"a": 2}) is None
    assert pick_queue({"a": 5, "b": 1}, {"a": 2, "b": 0}, {"a": 2, "b": 1}, {"a": 2, "b": 1}) == "b"


@pytest.mark.parametrize("bad", [{"weight": 0}, {"min_workers": -1}, {"prefetch": 0},
                                 {"max_rate": 0}, {"burst": 0}])
def test_validate_rejects_bad_policies(bad):
    with pytest.raises(ValueError, match="queue 'q'"):
        validate(QueuePolicy(name="q", **bad))
