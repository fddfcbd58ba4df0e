"""Memory in a container (issue 51) through real ``supervisor run`` processes inside a
memory cgroup the test makes (``memcgroup``; skipped where one cannot be made): kills by
the kernel's OOM killer told as ``memory``, the supervisor's own kills coming before the
kernel's, and sizes learned from the first jobs and kept for a fresh supervisor."""

from __future__ import annotations

import orjson
import psycopg
import pytest
from e2e import Supervisor, job_row, wait_until
from memcgroup import memory_cgroup

from shared.enqueue import enqueue
from shared.exitcodes import CLI_JOBS_FAILED

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]  # real supervisors

MIB = 1 << 20
GIB = 1 << 30


def _paused_kinds(dsn: str) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [kind for (kind,) in conn.execute("SELECT kind FROM supervisor.kind_pauses")]


def test_a_job_the_kernel_kills_is_recorded_as_memory_with_its_rss_never_poison(
        dsn, tmp_path):
    with memory_cgroup(2 * GIB) as cgroup:
        # Due 5 s from now, so the burst waits for it (its horizon) rather than finding
        # no work: enqueued after the start, it lost that race once the start got quicker.
        job_id = enqueue("mem_hold", {"megabytes": 600, "pause": 0.05}, max_attempts=2,
                         delay=5.0, dsn=dsn)
        sup = Supervisor(dsn, "--burst", "-n", "1", "--poll-interval", "0.1",
                         app="memory_handlers", wrapper=cgroup.wrapper)
        try:
            sup.wait_for_log("starting 1 children", timeout=60)
            # Lowered once the supervisor read the limit at its start: its own guard
            # still thinks 2 GiB, so the kernel is the one that kills (the case of a
            # container whose limit nobody read, or a job that outran the guard).
            cgroup.set_limit(300 * MIB)
            assert job_row(dsn, job_id)["state"] == "scheduled"  # not started yet
            assert sup.wait(180) == CLI_JOBS_FAILED, sup.err
        finally:
            sup.stop()
        kills = cgroup.oom_kills()
    row = job_row(dsn, job_id)
    assert row["state"] == "discarded", row
    kinds = [error["kind"] for error in row["errors"]]
    assert kinds == ["memory", "memory"], row["errors"]  # attempts spent, no poison entry
    for error in row["errors"]:
        assert "OOM killer" in error["message"], error
        assert error["usage"]["max_rss_bytes"] > 0, error
    assert kills >= 2
    assert "mem_hold" not in _paused_kinds(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:  # kept for later supervisors
        (peak,) = conn.execute("SELECT peak_bytes FROM supervisor.kind_memory "
                               "WHERE kind = 'mem_hold'").fetchone()
    assert peak > 0


def test_two_jobs_growing_past_the_cap_are_stopped_by_the_supervisor_not_the_kernel(
        dsn, tmp_path):
    with memory_cgroup(GIB) as cgroup:
        ids = [enqueue("mem_grow", {"pause": 0.25}, max_attempts=1, dsn=dsn)
               for _ in range(2)]
        sup = Supervisor(dsn, "--burst", "-n", "2", "--poll-interval", "0.1",
                         "--max-memory-per-child", "450MiB",
                         app="memory_handlers", wrapper=cgroup.wrapper)
        try:
            assert sup.wait(180) == CLI_JOBS_FAILED, sup.err
        finally:
            sup.stop()
        kills = cgroup.oom_kills()
    assert kills == 0, sup.err[-3000:]
    for job_id in ids:
        row = job_row(dsn, job_id)
        assert row["state"] == "discarded", row
        (error,) = row["errors"]
        assert error["kind"] == "memory", error
        assert error["usage"]["max_rss_bytes"] > 400 * MIB, error


def _states(dsn: str, ids: list[int]) -> dict[str, int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return dict(conn.execute(
            "SELECT state, count(*) FROM supervisor.jobs WHERE id = ANY(%s) GROUP BY state",
            (ids,)).fetchall())


def _overlaps(dsn: str, ids: list[int]) -> int:
    """Pairs of these jobs whose last attempts ran at the same time."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "SELECT count(*) FROM supervisor.jobs a JOIN supervisor.jobs b ON a.id < b.id "
            "WHERE a.id = ANY(%s) AND b.id = ANY(%s) "
            "AND a.attempted_at < b.finished_at AND b.attempted_at < a.finished_at",
            (ids, ids)).fetchone()[0]


def test_undeclared_600_mib_jobs_of_a_new_kind_all_complete_in_a_1_gib_cgroup(dsn, tmp_path):
    with memory_cgroup(GIB) as cgroup:
        # Four: the first runs alone (its kind unmeasured), and each of the three after
        # it is a chance to start one beside another by a size not learned.
        first = [enqueue("mem_hold", {"megabytes": 600, "seconds": 3}, dsn=dsn)
                 for _ in range(4)]
        sup = Supervisor(dsn, "--burst", "-n", "2", "--poll-interval", "0.1",
                         app="memory_handlers", wrapper=cgroup.wrapper)
        try:
            assert sup.wait(240) == 0, sup.err[-3000:]
        finally:
            sup.stop()
        assert _states(dsn, first) == {"completed": 4}
        assert "mem_hold" not in _paused_kinds(dsn)
        assert cgroup.oom_kills() <= 1, sup.err[-3000:]
        before = cgroup.oom_kills()
        # A fresh supervisor admits its very first jobs by the size the first one learned:
        # two are enough, its first claim takes both and must start them one at a time.
        second = [enqueue("mem_hold", {"megabytes": 600, "seconds": 3}, dsn=dsn)
                  for _ in range(2)]
        fresh = Supervisor(dsn, "--burst", "-n", "2", "--poll-interval", "0.1",
                           app="memory_handlers", wrapper=cgroup.wrapper)
        try:
            assert fresh.wait(240) == 0, fresh.err[-3000:]
        finally:
            fresh.stop()
        assert cgroup.oom_kills() == before, fresh.err[-3000:]
    assert _states(dsn, second) == {"completed": 2}
    assert _overlaps(dsn, second) == 0
    for job_id in first + second:
        assert job_row(dsn, job_id)["usage"]["max_rss_bytes"] >= 600 * MIB


def test_status_the_dashboard_and_the_start_line_show_the_budget_and_its_source(dsn):
    from click.testing import CliRunner

    from supervisor import admin
    from supervisor.cli import main
    from supervisor.dashboard import render

    with memory_cgroup(GIB) as cgroup:
        sup = Supervisor(dsn, "-n", "1", "--poll-interval", "0.1", app="memory_handlers",
                         wrapper=cgroup.wrapper)
        try:
            sup.wait_for_log("memory: budget", timeout=60)
            assert f"cgroup memory.limit_in_bytes {GIB} less the parent's RSS" in sup.err
            assert "process tree's RSS" in sup.err

            def published():
                result = CliRunner().invoke(main, ["status", "--json", "--dsn", dsn])
                assert result.exit_code == 0, result.output
                sups = orjson.loads(result.output)["supervisors"]  # [] until registered
                return sups[0] if sups and sups[0]["memory"] is not None else None

            live = wait_until(published, timeout=30, what="the supervisor's memory budget")
            memory = live["memory"]
            assert memory["source"].startswith("cgroup memory.limit_in_bytes")
            assert 700 * MIB < memory["budget"] < GIB
            assert memory["container"]["limit"] == GIB and memory["held"] == 0
            text = CliRunner().invoke(main, ["status", "--dsn", dsn]).output
            assert "memory of" in text and "container" in text and "held" in text
            with psycopg.connect(dsn, autocommit=True) as conn:
                sups = [admin.public_supervisor(s) for s in admin.live_supervisors(conn)]
            html = render.ENV.get_template("supervisors.html").render(
                supervisors=sups, stale=0, nav=[], path="/supervisors", title="t")
            assert "memory budget" in html and "cgroup memory.limit_in_bytes" in html
        finally:
            sup.stop()


def test_a_measured_small_kind_runs_side_by_side_here_and_in_a_fresh_supervisor(dsn):
    with memory_cgroup(GIB) as cgroup:
        first = [enqueue("mem_hold", {"megabytes": 50, "seconds": 2}, dsn=dsn)
                 for _ in range(5)]
        sup = Supervisor(dsn, "--burst", "-n", "2", "--poll-interval", "0.1",
                         app="memory_handlers", wrapper=cgroup.wrapper)
        try:
            assert sup.wait(120) == 0, sup.err[-3000:]
        finally:
            sup.stop()
        # The first job ran alone (its kind unmeasured); what it taught let the rest pair.
        assert _states(dsn, first) == {"completed": 5}
        with psycopg.connect(dsn, autocommit=True) as conn:
            runs = conn.execute("SELECT attempted_at, finished_at FROM supervisor.jobs "
                                "WHERE id = ANY(%s) ORDER BY attempted_at", (first,)).fetchall()
        assert all(start >= runs[0][1] for start, _ in runs[1:]), runs
        assert _overlaps(dsn, first) >= 1
        second = [enqueue("mem_hold", {"megabytes": 50, "seconds": 2}, dsn=dsn)
                  for _ in range(2)]
        fresh = Supervisor(dsn, "--burst", "-n", "2", "--poll-interval", "0.1",
                           app="memory_handlers", wrapper=cgroup.wrapper)
        try:
            assert fresh.wait(120) == 0, fresh.err[-3000:]
        finally:
            fresh.stop()
        assert cgroup.oom_kills() == 0
    # Measured before it started (the table, the jobs' usage): the two ran together.
    assert _overlaps(dsn, second) == 1
