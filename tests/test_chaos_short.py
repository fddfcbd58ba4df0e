"""Short versions of the chaos runs in ``scripts/chaos`` (seconds, not minutes), so a
regression that loses, strands or doubles a job shows up in the normal suite.

The soak runs against a private embedded PostgreSQL (``throwaway_server``) because it
restarts it; the bad-input cases use a fresh database on the shared one.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # scripts/ is not an installed package
    sys.path.insert(0, str(ROOT))

from soak_asserts import assert_storm_held  # noqa: E402

from scripts.chaos import badinput  # noqa: E402
from scripts.chaos.soak import SoakSettings, run_soak  # noqa: E402

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]


def test_jobs_survive_killed_children_a_killed_supervisor_and_a_database_restart(
        throwaway_server, tmp_path):
    # More sleeping jobs than the full soak, so children are busy when the driver looks.
    settings = SoakSettings(jobs=2000, supervisors=2, children=2, lease_ttl=3.0, grace=5.0,
                            kill_interval=0.3, supervisor_kills=1, db_restarts=1,
                            timeout=120.0, stall=60.0, seed=7, mix={"chaos_sleep": 0.08})
    report = run_soak(settings, throwaway_server, tmp_path, say=lambda _line: None)
    assert_storm_held(report, settings, min_child_kills=1)


def _assert_cases(cases: list[badinput.Case]) -> None:
    failed = [c for c in cases if not c.ok]
    assert not failed, "\n" + badinput.table(cases)


def test_bad_input_on_the_command_line_is_one_line_and_stores_nothing(dsn):
    _assert_cases(badinput.cli_cases(dsn))


def test_bad_results_and_arguments_fail_the_job_not_the_child_or_the_batch(dsn, tmp_path):
    _assert_cases(badinput.worker_cases(dsn, tmp_path))


def test_queue_names_with_quotes_and_semicolons_are_served_and_drop_nothing(dsn, tmp_path):
    _assert_cases(badinput.queue_name_cases(dsn, tmp_path))
