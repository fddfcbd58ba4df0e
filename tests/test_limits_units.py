"""Global limits, pure logic: the slice arithmetic keeps the slices within the limit
whatever order supervisors renew in, shares converge to fair ones, a retuned token
bucket never hands out more than its new size, and the CLI's values are parsed strictly."""

from __future__ import annotations

import random

import pytest

from supervisor.admin import AdminError, parse_rate, parse_whole
from supervisor.cli.format import describe_limits
from supervisor.db import LeaseRow
from supervisor.engine.leases import (
    burst_slice,
    fair_shares,
    rate_slice,
    running_slice,
    whole_shares,
)
from supervisor.engine.ratelimit import TokenBucket


def test_fair_shares_water_fill():
    assert fair_shares(10, {"a": 2, "b": 100, "c": 100}) == {"a": 2, "b": 4, "c": 4}
    assert fair_shares(10, {"a": 0, "b": 3}) == {"a": 0, "b": 3}
    assert whole_shares(10, {"a": 100, "b": 100, "c": 100}) == {"a": 4, "b": 3, "c": 3}


def _renew_all(limit, wants, held, leases, order):
    """Each supervisor in ``order`` renews (as under the lock); returns the allowed."""
    allowed = {}
    for me in order:
        others = {n: lease for n, lease in leases.items() if n != me}
        stored, allowed[me] = running_slice(limit, me, wants[me], held[me], others)
        leases[me] = LeaseRow(stored, wants[me], 0.0, 0.0)
        assert sum(lease.slots for lease in leases.values()) <= limit
    return allowed


def test_running_slices_never_add_up_past_the_limit_and_converge():
    rng = random.Random(7)
    limit = 7
    names = ["s1", "s2", "s3"]
    leases: dict[str, LeaseRow] = {}
    held = dict.fromkeys(names, 0)
    for _round in range(400):
        wants = {n: rng.choice([0, 2, 4, 8]) for n in names}
        order = names[:]
        rng.shuffle(order)
        allowed = _renew_all(limit, wants, held, leases, order)
        for n in names:  # between renewals each runs what it may, jobs end at random
            held[n] = rng.randint(0, max(allowed[n], 0)) if allowed[n] else min(
                held[n], rng.randint(0, held[n]))
            assert held[n] <= leases[n].slots
    # Steady demand: within two rounds every one holds its fair share.
    wants = dict.fromkeys(names, 8)
    held = dict.fromkeys(names, 0)
    for _ in range(3):
        allowed = _renew_all(limit, wants, held, leases, names)
    assert sorted(allowed.values()) == [2, 2, 3]


def test_a_supervisor_above_its_share_stops_starting_but_keeps_its_running_jobs():
    others = {"b": LeaseRow(0, 4, 0.0, 0.0)}
    stored, allowed = running_slice(4, "a", 4, 4, others)
    assert (stored, allowed) == (4, 2)  # runs 4, may start none until it is down to 2


def test_rate_slices_share_the_rate_and_leave_room_for_who_holds_it():
    holder = {"a": LeaseRow(0, 0, 10.0, 10.0)}
    assert rate_slice(10.0, "b", 10.0, holder) == 0.0  # a still holds it all
    assert rate_slice(10.0, "a", 10.0, {"b": LeaseRow(0, 0, 0.0, 10.0)}) == 5.0
    assert rate_slice(10.0, "b", 10.0, {"a": LeaseRow(0, 0, 5.0, 10.0)}) == 5.0
    assert rate_slice(10.0, "b", 0.0, {"a": LeaseRow(0, 0, 5.0, 10.0)}) == 0.0
    assert burst_slice(6, 5.0, 10.0) == 3.25 and burst_slice(1, 5.0, 10.0) == 1.25


def test_a_retuned_bucket_starts_empty_and_keeps_at_most_its_new_size():
    bucket = TokenBucket.empty(0.0)
    assert bucket.take(5, 10.0) == 0 and bucket.next_token_at(10.0) == float("inf")
    bucket.retune(10.0, 4.0, 10.0)
    assert bucket.take(5, 10.0) == 0
    assert bucket.take(5, 11.0) == 4  # a second at 10/s, but the bucket holds 4
    bucket.retune(10.0, 4.0, 11.0)
    bucket.refund(10)
    bucket.retune(1.0, 1.0, 11.0)
    assert bucket.available(11.0) == 1


@pytest.mark.parametrize("text, message", [
    ("-1", "whole number >= 0"), ("5.0", "whole number >= 0"), ("1e3", "whole number"),
    (" 5", "whole number"), ("'5'", "drop the quotes"), ('"5"', "drop the quotes"),
    ("99999999999", "from 0 to 2147483647"), ("five", "whole number"),
])
def test_whole_numbers_are_strict(text, message):
    with pytest.raises(AdminError, match=message) as caught:
        parse_whole("--max-running", text, 0)
    assert caught.value.usage and "\n" not in str(caught.value)


@pytest.mark.parametrize("text", ["0", "nan", "inf", "-3", "1_000", "'20'", "2e9", ".5"])
def test_rates_are_strict(text):
    with pytest.raises(AdminError, match="--max-rate"):
        parse_rate("--max-rate", text)


def test_values_that_parse():
    assert parse_whole("--burst", "12", 1) == 12
    assert parse_whole("--max-running", "none", 0) is None
    assert parse_rate("--max-rate", "0.5") == 0.5
    assert describe_limits({"max_running": 3, "max_rate": 2.5, "burst": 4,
                            "per_key_max_running": 1}) == (
        "running<=3,rate<=2.5/s,burst=4,per-key<=1")
    assert describe_limits(None) == "-"
