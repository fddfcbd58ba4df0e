"""The scheduler's demand across a claim's round trip: a wake that arrives while a claim
is out must survive that claim coming back short (its snapshot may predate the work),
and a keyed queue whose keys were full claims again when one of its jobs ends."""

from __future__ import annotations

from fairsim import Clock

from supervisor.config import RunConfig
from supervisor.db import StoredLimits
from supervisor.engine.planner import Scheduler
from supervisor.queue_policy import QueuePolicy


def scheduler(*queues: str) -> Scheduler:
    config = RunConfig(children=2, queue_policies={q: QueuePolicy(q) for q in queues})
    return Scheduler(config, list(queues), 0.0, clock=Clock())


def claim_in_flight(s: Scheduler, queue: str) -> int:
    plans = dict(s.plan_claims(0.0, 2, {}, {}))
    assert queue in plans
    return plans[queue]


def test_a_wake_during_a_claim_survives_its_short_answer():
    s = scheduler("q")
    s.wake(["q"])
    asked = claim_in_flight(s, "q")
    s.wake(["q"])  # a NOTIFY for a job inserted after the claim's snapshot
    s.claimed("q", asked, 0)
    assert "q" in s.demand


def test_a_short_claim_with_no_wake_puts_the_queue_to_sleep():
    s = scheduler("q")
    s.wake(["q"])
    s.claimed("q", claim_in_flight(s, "q"), 0)
    assert "q" not in s.demand


def test_a_keyed_queue_with_full_keys_claims_again_when_one_of_its_jobs_ends():
    s = scheduler("q", "other")
    s.limits.settings = {"q": StoredLimits(per_key_max_running=1)}
    s.wake(["q"])
    s.claimed("q", claim_in_flight(s, "q"), 0)
    assert "q" not in s.demand
    s.jobs_ended(["other"])
    assert "q" not in s.demand
    s.jobs_ended(["q"])
    assert "q" in s.demand


def test_a_keyed_job_ending_during_a_claim_keeps_the_queue_awake():
    s = scheduler("q")
    s.limits.settings = {"q": StoredLimits(per_key_max_running=1)}
    s.wake(["q"])
    asked = claim_in_flight(s, "q")
    s.jobs_ended(["q"])
    s.claimed("q", asked, 0)
    assert "q" in s.demand
