"""What ``status --explain`` publishes per queue (``engine.explain``), over a real
scheduler and run times without a database: the values the tuning rules decide, the rule
that decided each, and one debug line per value that moved between two rounds."""

from __future__ import annotations

import logging

from fairsim import Clock

from supervisor.config import RunConfig
from supervisor.engine.explain import Explainer
from supervisor.engine.planner import Scheduler
from supervisor.pool import RunTimes
from supervisor.queue_policy import QueuePolicy
from supervisor.tuning import DEFAULT, Tuning


def explainer(*queues: str, prefetch: int | None = None,
              tuning: Tuning = DEFAULT) -> tuple[Explainer, Scheduler, RunTimes]:
    config = RunConfig(children=2, tuning=tuning,
                       queue_policies={q: QueuePolicy(q, prefetch=prefetch) for q in queues})
    times = RunTimes(tuning)
    planner = Scheduler(config, list(queues), 0.0, clock=Clock(), run_times=times)
    return Explainer(planner, times), planner, times


def test_a_queue_with_work_claims_for_its_children_by_the_rule_that_set_its_depth():
    explain, planner, times = explainer("q")
    planner.wake(["q"])
    planner.depth.latency = 0.002
    for _ in range(5):
        times.ran("k", "q", 0.02)
    said = explain.queue("q", 2)
    assert said["children"] == 2
    assert said["depth"] == {"value": 5, "rule": "claim_covers"}
    assert said["claim"] == {"value": 10, "rule": "claim_covers"}
    assert said["pipe"] == {"value": 5, "rule": "claim_covers"}
    assert said["kinds"]["k"]["overrun_after"] == {"value": 0.05, "rule": "min_overrun"}
    assert said["carry"]["claim_in_flight"] == {"value": 0.5, "rule": "carry_limit"}


def test_a_set_prefetch_and_another_table_say_so():
    explain, _planner, times = explainer("q", prefetch=3)
    times.ran("k", "q", 0.02)
    said = explain.queue("q", 2)
    assert said["depth"] == said["pipe"] == {"value": 3, "rule": "prefetch"}
    explain, _planner, times = explainer("q", tuning=Tuning(long_job=0.01))
    times.ran("k", "q", 0.02)
    said = explain.queue("q", 2)
    assert said["pipe"] == {"value": 2, "rule": "long_job_pipe"}
    assert said["carry"]["claim_coming"] == {"value": None, "rule": "long_job"}
    explain, _planner, times = explainer("q", tuning=Tuning(long_job=0.01,
                                                           long_pipe_until=0.015))
    times.ran("k", "q", 0.02)
    said = explain.queue("q", 2)
    assert said["pipe"] == {"value": 1, "rule": "long_pipe_until"}


def test_a_tailed_kind_of_long_jobs_shows_a_cap_of_one_set_by_long_job():
    explain, _planner, times = explainer("q")
    for i in range(200):
        times.ran("k", "q", 3.0 if i % 20 == 19 else 0.15)
    said = explain.queue("q", 2)
    assert said["kinds"]["k"]["pipe_cap"] == {"value": 1, "rule": "long_job"}


def test_a_tailed_kind_shows_its_cap_and_a_moved_value_is_logged_once(caplog):
    explain, _planner, times = explainer("q")
    explain.publish(2)
    with caplog.at_level(logging.DEBUG, logger="supervisor.engine"):
        for i in range(200):
            times.ran("k", "q", 3.0 if i == 199 else 0.002)
        said = explain.publish(2)["q"]
        assert said["kinds"]["k"]["pipe_cap"] == {"value": 2, "rule": "min_tail_pipe"}
        moved = [r.getMessage() for r in caplog.records]
        assert any(m.startswith("queue q: depth is now ") and m.endswith(
            "(was 1 (unmeasured))") for m in moved), moved
        caplog.clear()
        explain.publish(2)  # nothing moved since
        assert not caplog.records
