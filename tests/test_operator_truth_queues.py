"""Issue 49: ``-q slow,bars`` serves the queues ``slow`` and ``bars`` (as Celery's
``-Q a,b``), not one queue named ``slow,bars`` that nothing matches; and a served queue
that no loaded handler names is warned about as the supervisor starts."""

from __future__ import annotations

import pytest
from e2e import run_burst, state_counts

from shared.enqueue import enqueue_many

pytestmark = pytest.mark.timeout(90)


def test_a_comma_separated_queue_flag_serves_each_queue(dsn):
    enqueue_many("e2e_noop", [{"n": i} for i in range(3)], dsn=dsn)  # queue default
    enqueue_many("e2e_work_a", [{"seconds": 0}] * 2, queue="weighted_a", dsn=dsn)
    enqueue_many("e2e_work_b", [{"seconds": 0}] * 2, queue="weighted_b", dsn=dsn)  # not served
    sup = run_burst(dsn, "-n", "1", "-q", "default,weighted_a, imagse")
    assert state_counts(dsn) == {"completed": 5, "available": 2}
    assert "for queues default,weighted_a,imagse" in sup.err
    warnings = [line for line in sup.err.splitlines() if "warning" in line.lower()]
    assert len(warnings) == 1, sup.err
    assert "no loaded handler serves queue 'imagse'" in warnings[0]


def test_repeated_and_comma_separated_queue_flags_mix(dsn):
    enqueue_many("e2e_work_a", [{"seconds": 0}], queue="weighted_a", dsn=dsn)
    enqueue_many("e2e_work_b", [{"seconds": 0}], queue="weighted_b", dsn=dsn)
    sup = run_burst(dsn, "-n", "1", "-q", "weighted_a,", "-q", "weighted_b,weighted_a")
    assert state_counts(dsn) == {"completed": 2}
    assert "for queues weighted_a,weighted_b" in sup.err
    assert "warning" not in sup.err.lower()
