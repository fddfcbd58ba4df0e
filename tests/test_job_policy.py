"""A claimed job's hard timeout: its row, else its handler's @job, else the config."""

from __future__ import annotations

import pool_handlers  # noqa: F401  (registers pool_sleep_with_timeout: @job(timeout=0.3))

from shared.jobs import ClaimedJob
from supervisor.engine.policy import resolve_timeout


def claimed(kind: str, timeout: float | None) -> ClaimedJob:
    return ClaimedJob(1, kind, "default", 1, 5, 0, timeout, "{}")


def test_the_row_wins_over_handler_and_config():
    assert resolve_timeout(claimed("pool_sleep_with_timeout", 7.0), 9.0) == 7.0


def test_the_handler_wins_over_the_config():
    assert resolve_timeout(claimed("pool_sleep_with_timeout", None), 9.0) == 0.3


def test_the_config_applies_when_row_and_handler_are_silent():
    assert resolve_timeout(claimed("pool_noop", None), 9.0) == 9.0
    assert resolve_timeout(claimed("no_such_kind", None), None) is None


def test_there_is_a_built_in_hard_timeout_and_zero_disables_it():
    from supervisor.config import RunConfig

    builtin = RunConfig().default_timeout
    assert builtin == 3600.0
    assert resolve_timeout(claimed("pool_noop", None), builtin) == 3600.0
    assert resolve_timeout(claimed("pool_noop", None), 0.0) is None
    assert resolve_timeout(claimed("pool_noop", 0.0), builtin) is None
