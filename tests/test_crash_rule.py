"""What counts as a crash (issue 45): ``shared.jobs.CrashRule`` per kind, the
``@job(counts_as_crash=...)`` that sets it, and what the reporter does with an
uncounted timeout (said at once, no breaker count). Pure logic: no database."""

from __future__ import annotations

import pytest

from shared.jobs import CrashRule, crash_kinds
from workers import job


def test_by_default_a_crash_and_a_hang_count_and_a_timeout_and_a_memory_kill_do_not():
    rule = CrashRule()
    assert rule.signature("k", "crashed", "child 7 killed by SIGSEGV") == (
        "crashed: killed by SIGSEGV")
    assert rule.signature("k", "hung", "no heartbeat") == "hung"
    assert rule.signature("k", "timeout", "ran past its 1 s timeout") is None
    assert rule.signature("k", "memory", "RSS passed the cap") is None
    assert rule.signature("k", "error", "boom") is None


def test_a_kind_names_its_own():
    rule = CrashRule({"slow": frozenset({"timeout"}), "lax": frozenset()})
    assert rule.counts("slow", "timeout") and not rule.counts("slow", "crashed")
    assert not rule.counts("lax", "crashed")
    assert rule.counts("other", "crashed")  # the default for the rest


@pytest.mark.parametrize(("bad", "says"), [
    ("timeout", "must be a set"), ({"oom"}, "names oom"), ({"error"}, "names error"),
    (3, "must be a set"),
])
def test_counts_as_crash_takes_only_the_four_names(bad, says):
    with pytest.raises(ValueError, match=says):
        crash_kinds(bad, "counts_as_crash")
    with pytest.raises(ValueError, match="counts_as_crash"):
        job(name=f"crash_rule_bad_{bad!r}", counts_as_crash=bad)(lambda: None)


def test_the_handlers_rule_is_what_the_engine_builds():
    from supervisor.engine.policy import crash_rule
    from workers.registry import REGISTRY

    job(name="crash_rule_slow", counts_as_crash=["timeout", "crashed"])(lambda: None)
    try:
        rule = crash_rule(["crash_rule_slow", "crash_rule_unknown"])
        assert rule.counts("crash_rule_slow", "timeout")
        assert not rule.counts("crash_rule_unknown", "timeout")
    finally:
        REGISTRY.pop("crash_rule_slow", None)


def test_an_uncounted_timeout_is_said_at_once_and_not_counted_by_the_breaker(caplog):
    from shared.jobs import ClaimedJob
    from supervisor.engine.ledger import Ledger
    from supervisor.engine.outbox import Outbox
    from supervisor.engine.reporting import OutcomeReporter
    from supervisor.observe.metrics import SupervisorMetrics
    from supervisor.pool import JobFailed

    metrics = SupervisorMetrics("o", version="1")
    reporter = OutcomeReporter(Ledger(), Outbox(metrics, 0.02), metrics)
    slow = ClaimedJob(1, "chunk", "video", 1, 5, 0, 8.0, "{}")
    caplog.set_level("INFO", logger="supervisor")
    reporter.record([JobFailed(slow, "timeout", "ran past its 8 s timeout", None, None,
                               False, 8.0)], 0.0)
    assert reporter.crashes == []
    assert [r.getMessage() for r in caplog.records if r.name == "supervisor.jobs"] == [
        "job 1 chunk attempt 1/5 failed (timeout), will retry: ran past its 8 s timeout"]
