"""The smaller things a user tripped on: warnings for queues nobody serves, `jobs list`
saying when more rows match, child counts the machine cannot hold, and schema-missing
errors that name the database and where its DSN came from."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from click.testing import CliRunner
from e2e import ROOT, TESTS_DIR

from shared.enqueue import enqueue_many
from supervisor.cli.limits import CHILDREN_PER_CPU, children_problem
from supervisor.cli.main import main

pytestmark = [pytest.mark.timeout(60), pytest.mark.slow]  # processes or waits: CI lane


def invoke(*args: str, **env: str):
    return CliRunner().invoke(main, list(args), env=env or None)


def test_pausing_an_unknown_queue_warns_but_pauses(dsn, conn):
    result = invoke("queues", "pause", "no_such_queue", "--dsn", dsn)
    assert result.exit_code == 0, result.output
    assert "warning: queue 'no_such_queue' has no jobs and no live supervisor serves it" \
        in result.output
    assert conn.execute("SELECT paused FROM supervisor.queues WHERE name = 'no_such_queue'"
                        ).fetchone() == (True,)


def test_pausing_a_queue_with_jobs_does_not_warn(dsn, conn):
    conn.execute("INSERT INTO supervisor.jobs (kind, queue, state, finished_at) "
                 "VALUES ('k', 'images', 'completed', now())")
    result = invoke("queues", "pause", "images", "--dsn", dsn)
    assert result.exit_code == 0 and "warning" not in result.output


def test_run_warns_about_a_queue_no_handler_serves(dsn):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS_DIR), str(ROOT)]),
               SUPERVISOR_DSN=dsn)
    proc = subprocess.run([sys.executable, "-m", "supervisor", "run", "--app", "e2e_handlers",
                           "--burst", "-n", "1", "-q", "imagse", "-q", "default"],
                          capture_output=True, text=True, env=env, cwd=str(TESTS_DIR),
                          timeout=30)
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "no loaded handler serves queue 'imagse'" in warnings[0]


def test_jobs_list_says_when_more_rows_match(dsn, conn):
    enqueue_many("k", [{}] * 4, conn=conn)
    shown = invoke("jobs", "list", "--limit", "3", "--dsn", dsn)
    assert shown.exit_code == 0
    assert "the newest 3 shown; more jobs match: raise --limit" in shown.output
    every = invoke("jobs", "list", "--limit", "4", "--dsn", dsn)
    assert "more jobs match" not in every.output


def test_jobs_list_json_stays_parseable_when_more_match(dsn, conn):
    import orjson

    enqueue_many("k", [{}] * 3, conn=conn)
    result = CliRunner().invoke(
        main, ["jobs", "list", "--json", "--limit", "2", "--dsn", dsn])
    assert len(orjson.loads(result.stdout)) == 2
    assert "more jobs match" in result.stderr


def test_more_children_than_the_machine_holds_is_one_line_exit_2(dsn):
    result = invoke("run", "--app", "e2e_handlers", "-n", "10000", "--dsn", dsn)
    assert result.exit_code == 2
    assert result.output.count("\n") == 1
    assert f"the ceiling is {CHILDREN_PER_CPU} per CPU" in result.output


def test_children_ceiling_and_nproc():
    assert children_problem(64, cpus=1) is None
    assert "128 for 2 CPUs" in children_problem(129, cpus=2)


def test_children_beyond_rlimit_nproc_are_refused():
    """As an ordinary user (nobody) with ``ulimit -u 5``: 60 children do not fit."""
    # The module alone, run by the system interpreter: the venv's may not be reachable.
    code = (f"import runpy; ns = runpy.run_path({str(ROOT / 'supervisor/cli/limits.py')!r});"
            "print(ns['children_problem'](60, cpus=64))")

    def limit() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_NPROC, (5, 5))

    kwargs = {"user": 65534, "group": 65534} if os.getuid() == 0 else {}
    python = "/usr/bin/python3" if os.getuid() == 0 else sys.executable
    try:
        proc = subprocess.run([python, "-c", code], capture_output=True, text=True,
                              preexec_fn=limit, timeout=30, **kwargs)
    except PermissionError:
        pytest.skip("user nobody cannot run a Python interpreter here")
    assert "do not fit in RLIMIT_NPROC (ulimit -u 5)" in proc.stdout, proc.stderr


def test_schema_missing_names_database_and_dsn_source(fresh_dsn, monkeypatch):
    monkeypatch.delenv("SUPERVISOR_DSN", raising=False)
    monkeypatch.setenv("DATABASE_URL", fresh_dsn)
    result = invoke("status")
    assert result.exit_code == 1
    dbname = fresh_dsn.rsplit("dbname=", 1)[-1].split()[0] if "dbname=" in fresh_dsn \
        else fresh_dsn.rsplit("/", 1)[-1]
    assert f"/{dbname} (DSN from DATABASE_URL)" in result.output
    assert "set SUPERVISOR_DSN or pass --dsn" in result.output
    flagged = invoke("status", "--dsn", fresh_dsn)
    assert "(DSN from --dsn)" in flagged.output


def test_producer_api_schema_missing_is_one_clear_line(fresh_dsn):
    env = dict(os.environ, PYTHONPATH=str(ROOT), SUPERVISOR_DSN=fresh_dsn)
    proc = subprocess.run([sys.executable, "-c", "import supervisor; supervisor.enqueue('k')"],
                          capture_output=True, text=True, env=env, timeout=30)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("shared.db.SchemaMissing: the supervisor schema is missing in "
                           "database ") and "DSN from SUPERVISOR_DSN" in last
    assert "During handling of the above exception" not in proc.stderr


def test_run_on_an_unmigrated_database_names_it_and_the_dsn_source(fresh_dsn):
    """``run`` checks the schema on its own first connection (issue 31), after the
    children are forked: the same one line as before, and no child outlives it."""
    env = dict(os.environ, DATABASE_URL=fresh_dsn)
    env.pop("SUPERVISOR_DSN", None)
    done = subprocess.run([sys.executable, "-m", "supervisor", "run", "--app", "e2e_handlers",
                           "--burst", "-n", "2"], capture_output=True, text=True, timeout=60,
                          env=env, cwd=str(TESTS_DIR))
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "(DSN from DATABASE_URL)" in lines[0] and "supervisor migrate" in lines[0], lines
    assert "set SUPERVISOR_DSN or pass --dsn" in lines[0]
