"""Batch pipelines under a kill storm (issue 42: "the kill storms still hold with these
features used"), the chaos checker's rules for members a batch's stop cancelled, and
the storm's check of a cancel (a member claimed after its commit must not begin).

The storm (``scripts/chaos/batch_storm.py``) runs real supervisors on a fresh database:
a batch with a callback whose members' results travel along ``depends_on`` edges to
merges and on to a publishing job, a batch aborted by its ``max_failures``, and a batch
cancelled mid-run, while children and whole supervisors are SIGKILLed and replaced. The
longer soak is the script itself (``python scripts/chaos/batch_storm.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import orjson
import psycopg
import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # scripts/ is not an installed package
    sys.path.insert(0, str(ROOT))

from scripts.chaos.batch_storm import (  # noqa: E402
    CLAIM_AUDIT,
    Pipeline,
    StormReport,
    StormSettings,
    check_cancel,
    run_storm,
    summary,
)
from scripts.chaos.check import check  # noqa: E402
from shared.batches import Batch  # noqa: E402
from shared.enqueue import enqueue_many  # noqa: E402

OWNER = "vm:4101:aaaa0001"


@pytest.mark.timeout(240)
@pytest.mark.slow
def test_a_batch_pipeline_survives_killed_children_and_supervisors(dsn, tmp_path):
    settings = StormSettings(parts=400, doomed=300, failing=80, max_failures=5,
                             supervisors=2, children=2, supervisor_kills=4,
                             timeout=150.0, seed=3)
    report = run_storm(settings, dsn, tmp_path, say=lambda _line: None)
    text = summary(report, settings)
    assert report.check is not None, text
    assert report.child_kills >= 1 and len(report.kills) >= 1, text
    assert report.cancel_committed_at is not None, text
    # Every rule is in `problems` and the checker's violations; the figures above show
    # the storm happened.
    assert report.violations == [], text
    assert report.passed, text


def _member(conn: psycopg.Connection) -> int:
    [job_id] = enqueue_many("chaos_sleep", [{"ms": 1}], conn=conn)
    return job_id


def _cancel(conn: psycopg.Connection, job_id: int, attempt: int, running: bool) -> None:
    # What schema 0025's batch_drain writes: a running member's entry names its
    # supervisor, a waiting member's does not.
    entry = {"attempt": attempt, "kind": "cancelled", "message": "batch 1 cancelled by "
             "operator", "supervisor": OWNER if running else None}
    conn.execute("UPDATE supervisor.jobs SET state = 'cancelled', attempt = %s, "
                 "errors = errors || %s::jsonb, finished_at = now() WHERE id = %s",
                 (attempt, orjson.dumps([entry]).decode(), job_id))


def _runlog(path: Path, *lines: str) -> Path:
    path.write_text("".join(f"{line}\n" for line in lines))
    return path


def test_a_member_cancelled_while_running_may_have_one_cut_short_run(dsn, tmp_path):
    with psycopg.connect(dsn, autocommit=True) as conn:
        job_id = _member(conn)
        _cancel(conn, job_id, attempt=1, running=True)
    runlog = _runlog(tmp_path / "runs.log", f"S {job_id} 1 4102 1000.0 4101")
    assert check(dsn, runlog, may_cancel=frozenset({job_id})).violations == []
    # Not a member of a stopped batch: a cancelled job is not one the run may end with.
    kinds = check(dsn, runlog).violation_kinds
    assert kinds["not final"] == 1


def test_a_member_cancelled_while_waiting_must_not_have_run_that_attempt(dsn, tmp_path):
    with psycopg.connect(dsn, autocommit=True) as conn:
        job_id = _member(conn)
        _cancel(conn, job_id, attempt=1, running=False)
    # Its attempt 1 ran (and ended) although the stop found it waiting: a run nothing
    # accounts for.
    runlog = _runlog(tmp_path / "runs.log", f"S {job_id} 1 4102 1000.0 4101",
                     f"E {job_id} 1 4102 1000.1")
    result = check(dsn, runlog, may_cancel=frozenset({job_id}))
    assert result.violation_kinds["unexplained double run"] == 1, result.violations


def test_a_stopped_member_running_twice_at_the_stop_is_a_double_run(dsn, tmp_path):
    with psycopg.connect(dsn, autocommit=True) as conn:
        job_id = _member(conn)
        _cancel(conn, job_id, attempt=1, running=True)
    runlog = _runlog(tmp_path / "runs.log", f"S {job_id} 1 4102 1000.0 4101",
                     f"S {job_id} 1 4103 1000.5 4101")
    result = check(dsn, runlog, may_cancel=frozenset({job_id}))
    assert result.violation_kinds["unexplained double run"] == 1, result.violations


def test_a_cancelled_member_claimed_after_the_commit_that_began_is_a_problem(dsn, tmp_path):
    committed_at = 2000.0
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(CLAIM_AUDIT)
        queued, late, early = (_member(conn) for _ in range(3))
        # Claimed before the stop mark: queued, then begun after it (counted apart);
        # claimed after it and begun (a problem); claimed and begun before it (fine).
        for job_id, claimed in ((queued, 1999.0), (late, 2000.5), (early, 1998.0)):
            conn.execute("INSERT INTO chaos.claims VALUES (%s, 1, to_timestamp(%s))",
                         (job_id, claimed))
    runlog = _runlog(tmp_path / "runs.log", f"S {queued} 1 4102 2000.2 4101",
                     f"S {late} 1 4102 2000.6 4101", f"S {early} 1 4103 1998.1 4101")
    pipeline = Pipeline(Batch(1, [queued, late, early]), Batch(2, []), Batch(3, []), 0, [], 0)
    report = StormReport()
    check_cancel(dsn, pipeline, report, runlog, committed_at)
    assert report.late_doomed_runs == 1 and report.queued_late == 1
    assert report.queued_late_delay == pytest.approx(0.2)
    assert report.problems == [f"1 doomed members claimed after the cancel committed "
                               f"began: [{late}]"]
