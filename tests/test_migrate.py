"""Migrations: versioned, idempotent, safe when two run at once; the schema contract."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import psycopg
import pytest
from legacy_schema import migrate_the_old_way

from shared.db import SchemaMissing
from shared.migrate import (
    available_migrations,
    current_version,
    ensure_schema,
    migrate,
)

pytestmark = pytest.mark.timeout(60)


def test_migrate_applies_everything_once_then_nothing(fresh_dsn):
    with psycopg.connect(fresh_dsn, autocommit=True) as conn:
        assert current_version(conn) is None
        first = migrate(conn)
        assert [m.version for m in first] == [m.version for m in available_migrations()]
        assert migrate(conn) == []
        assert current_version(conn) == available_migrations()[-1].version
        rows = conn.execute("SELECT version FROM supervisor.migrations ORDER BY 1").fetchall()
        assert [r[0] for r in rows] == [m.version for m in available_migrations()]


def test_two_concurrent_migrations_apply_each_file_exactly_once(fresh_dsn):
    barrier = threading.Barrier(2)
    results: list[list[int]] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            with psycopg.connect(fresh_dsn, autocommit=True) as conn:
                barrier.wait()
                results.append([m.version for m in migrate(conn)])
        except BaseException as exc:  # surfaced in the main thread below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    expected = [m.version for m in available_migrations()]
    assert sorted(results, key=len) == [[], expected]


def test_ensure_schema_names_the_fix_when_missing(fresh_dsn):
    with psycopg.connect(fresh_dsn, autocommit=True) as conn:
        with pytest.raises(SchemaMissing, match="supervisor migrate"):
            ensure_schema(conn)
        migrate(conn)
        assert ensure_schema(conn) == available_migrations()[-1].version


def test_plain_sql_insert_fills_every_default(conn):
    row = conn.execute(
        "INSERT INTO supervisor.jobs (kind, queue, args) VALUES ('k', 'q', '{\"a\": 1}') "
        "RETURNING state, priority, attempt, max_attempts, errors, run_at <= now()"
    ).fetchone()
    assert row == ("available", 0, 0, None, [], True)  # max_attempts: resolved at claim


def test_args_must_be_an_object(conn):
    with pytest.raises(psycopg.errors.CheckViolation):
        conn.execute("INSERT INTO supervisor.jobs (kind, args) VALUES ('k', '[1]')")


def test_a_schema_newer_than_the_code_is_refused_by_run_and_migrate(dsn, tmp_path):
    from shared.migrate import latest_version

    newer = latest_version() + 1
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO supervisor.migrations (version, name) VALUES (%s, 'future')",
                     (newer,))
        with pytest.raises(SchemaMissing, match=f"version {newer}, newer than this code"):
            ensure_schema(conn)
    for command in (["migrate"], ["run", "--app", "e2e_handlers", "--burst"]):
        done = subprocess.run([sys.executable, "-m", "supervisor", *command, "--dsn", dsn],
                              capture_output=True, text=True, timeout=60,
                              cwd=str(Path(__file__).parent))
        assert done.returncode == 1, (command, done.stdout, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and f"version {newer}, newer than this code" in lines[0], lines
        assert "up to date" not in done.stdout


def test_migrate_upgrades_a_database_at_0008_and_its_held_dependents(fresh_dsn):
    """Jobs held by 0008's depends_on (an array and watched dependencies, no edges) are
    carried into 0009's edges and counters by the old files (git history), into the
    baseline by today's `supervisor migrate`, and released as their dependencies
    finish."""
    with psycopg.connect(fresh_dsn, autocommit=True) as conn:
        migrate_the_old_way(conn, upto=8)
        a, b, c = (conn.execute("INSERT INTO supervisor.jobs (kind, watched) VALUES ('k', true) "
                                "RETURNING id").fetchone()[0] for _ in range(3))
        conn.execute("UPDATE supervisor.jobs SET state = 'completed' WHERE id = %s", (c,))
        held = [conn.execute(
            "INSERT INTO supervisor.jobs (kind, state, run_at, depends_on) "
            "VALUES ('k', 'scheduled', '9999-12-31 00:00:00+00', %s) RETURNING id",
            (deps,)).fetchone()[0] for deps in ([a, b, c], [c])]
        migrate_the_old_way(conn)
    done = subprocess.run([sys.executable, "-m", "supervisor", "migrate", "--dsn", fresh_dsn],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    with psycopg.connect(fresh_dsn, autocommit=True) as conn:
        assert current_version(conn) == available_migrations()[-1].version

        def state(job_id):
            return conn.execute("SELECT state FROM supervisor.jobs WHERE id = %s",
                                (job_id,)).fetchone()[0]

        assert conn.execute("SELECT pending FROM supervisor.dependents WHERE id = %s",
                            (held[0],)).fetchone() == (2,)
        assert state(held[1]) == "available"  # its one dependency had completed
        conn.execute("UPDATE supervisor.jobs SET state = 'completed' WHERE id = %s", (a,))
        assert state(held[0]) == "scheduled"
        conn.execute("UPDATE supervisor.jobs SET state = 'completed' WHERE id = %s", (b,))
        assert state(held[0]) == "available"
