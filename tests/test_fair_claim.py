"""A fair queue's claim (``fair = "batch"``, issue 42) against real PostgreSQL: batches
served round-robin at equal priority, one batch alone taking the whole claim, priority
still first, jobs of no batch as one more group, the plan on an analyzed table reading
indexes only, the setting's checks, and that queues not fair keep the plain statement."""

from collections import Counter

import pytest

from shared.batches import Callback
from shared.enqueue import enqueue_many
from supervisor.config import ConfigError, RunConfig, apply_queue_flags
from supervisor.db import Store
from supervisor.db.claim import (
    ClaimBounds,
    ClaimRequest,
    ClaimVariant,
    Shape,
    claim_sql,
    variant,
)
from supervisor.queue_policy import QueuePolicy, validate

pytestmark = [pytest.mark.timeout(120)]


def a_batch(conn, n, queue="f", priority=0):
    return enqueue_many("k", [{}] * n, then=Callback("cb", {}), queue=queue,
                        priority=priority, conn=conn).ids


def claim(conn, limit, queue="f", bounds=None):
    request = ClaimRequest(queue, ["k"], limit, fair=True, bounds=bounds)
    return [j.id for j in Store(conn, "me").run_claim(request).jobs]


def test_batches_take_turns_and_one_alone_takes_everything(conn):
    first, second, third = a_batch(conn, 40), a_batch(conn, 40), a_batch(conn, 40)
    taken = claim(conn, 9)
    by_batch = Counter(0 if i in first else 1 if i in second else 2 for i in taken)
    assert by_batch == {0: 3, 1: 3, 2: 3}
    # Within a batch, in its own order.
    assert [i for i in taken if i in first] == first[:3]
    # A claim smaller than the number of batches: one each, never two of one batch.
    pair = claim(conn, 2)
    assert sorted(Counter(0 if i in first else 1 if i in second else 2
                          for i in pair).values()) == [1, 1]
    # Work-conserving: the other batches drained, the last one takes every slot.
    conn.execute("UPDATE supervisor.jobs SET state = 'completed', finished_at = now() "
                 "WHERE id = ANY(%s)", (first + second,))
    rest = [i for i in third if i not in taken + pair]
    assert claim(conn, 10) == rest[:10]


def test_over_many_claims_each_batch_gets_its_share(conn):
    first, second = a_batch(conn, 300), a_batch(conn, 300)
    seen = Counter()
    for _ in range(100):  # one job a claim: the draw decides the turn
        [job] = claim(conn, 1)
        seen["first" if job in first else "second" if job in second else "?"] += 1
    assert 30 <= seen["first"] <= 70, seen


def test_priority_comes_before_the_turn_and_loose_jobs_are_a_group(conn):
    a_batch(conn, 10, priority=5)
    urgent = a_batch(conn, 3, priority=0)
    got = claim(conn, 4)
    assert set(urgent) <= set(got) and len(got) == 4  # all of the urgent batch first
    conn.execute("DELETE FROM supervisor.jobs")
    loose = enqueue_many("k", [{}] * 5, queue="f", conn=conn)
    members = a_batch(conn, 5)
    got = claim(conn, 4)
    assert Counter(i in loose for i in got) == {True: 2, False: 2}
    assert set(got) <= set(loose + members)


def test_a_bounded_fair_claim_skips_what_it_cannot_hold(conn):
    small = a_batch(conn, 3)
    big = enqueue_many("k", [{}] * 3, then=Callback("cb", {}), queue="f", cpus=4,
                       conn=conn).ids
    got = claim(conn, 6, bounds=ClaimBounds(2, None))
    assert sorted(got) == small and not set(got) & set(big)


def test_the_fair_claim_reads_indexes_only_after_analyze(conn):
    for _ in range(4):
        a_batch(conn, 5000)
    enqueue_many("k", [{}] * 2000, queue="f", conn=conn)
    enqueue_many("k", [{}] * 500, queue="other", conn=conn)
    conn.execute("ANALYZE supervisor.jobs")
    params = Store(conn, "me")._claim_params(ClaimRequest("f", ["k"], 64, fair=True))
    plan = "\n".join(r[0] for r in conn.execute(
        "EXPLAIN " + claim_sql(ClaimVariant(False, False, Shape.BARE, False, True)), params))
    assert "Seq Scan" not in plan, plan
    assert "Recursive Union" in plan and "jobs_fair_idx" in plan, plan


def test_only_a_fair_queue_runs_the_fair_statement():
    plain = variant(ClaimRequest("q", ["k"], 5), blocking=True)
    fair = variant(ClaimRequest("q", ["k"], 5, fair=True), blocking=True)
    keyed = variant(ClaimRequest("q", ["k"], 5, per_key=2, fair=True), blocking=True)
    assert not plain.fair and fair.fair and not keyed.fair  # a per-key limit wins
    assert "jobs_fair_idx" not in claim_sql(plain) and "batch_id" not in claim_sql(plain)
    assert "batches(pos, b" in claim_sql(fair)
    for shape in Shape:
        assert "batches(pos, b" in claim_sql(ClaimVariant(False, False, shape, False, True))


def test_the_setting_is_checked():
    assert validate(QueuePolicy("q", fair="batch")).fair == "batch"
    with pytest.raises(ValueError, match="fair must be one of 'batch'"):
        validate(QueuePolicy("q", fair="key"))
    with pytest.raises(ValueError, match="fair and aging cannot be combined"):
        validate(QueuePolicy("q", fair="batch", aging=5.0))
    config = apply_queue_flags(RunConfig(), ["tiles.fair=batch"])
    assert config.policy("tiles").fair == "batch"
    with pytest.raises(ConfigError, match="fair must be one of"):
        apply_queue_flags(RunConfig(), ["tiles.fair=kind"])
