"""`supervisor migrate` and `supervisor enqueue` through click, exit codes included."""

from __future__ import annotations

import psycopg
import pytest
from click.testing import CliRunner

from shared.migrate import available_migrations
from supervisor.cli.main import main

pytestmark = pytest.mark.timeout(60)


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def test_migrate_then_up_to_date(fresh_dsn):
    first = invoke("migrate", "--dsn", fresh_dsn)
    assert first.exit_code == 0, first.output
    assert first.output.splitlines() == [f"applied {m.version:04d}_{m.name}"
                                         for m in available_migrations()]
    assert first.output.startswith("applied 0030_baseline\n")
    again = invoke("migrate", "--dsn", fresh_dsn)
    assert again.exit_code == 0
    assert again.output.strip().startswith("schema is up to date (version ")


def test_enqueue_prints_the_new_id(dsn, conn):
    result = invoke("enqueue", "resize", "--args", '{"path": "a.png"}', "--queue", "images",
                    "--priority", "3", "--delay", "30", "--max-attempts", "2",
                    "--timeout", "9", "--dsn", dsn)
    assert result.exit_code == 0, result.output
    job_id = int(result.output.strip())
    row = conn.execute("SELECT kind, queue, args, priority, state, max_attempts, timeout "
                       "FROM supervisor.jobs WHERE id = %s", (job_id,)).fetchone()
    assert row == ("resize", "images", {"path": "a.png"}, 3, "scheduled", 2, 9.0)


@pytest.mark.parametrize("bad", ['{"a": ', "[1, 2]", "42", "nope"])
def test_malformed_args_exit_2_with_one_line(bad, dsn):
    result = invoke("enqueue", "k", "--args", bad, "--dsn", dsn)
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("supervisor: error: --args is not a JSON object")
    assert "Traceback" not in result.output


def test_unreachable_database_exits_1_with_one_line():
    result = invoke("enqueue", "k", "--dsn", "postgresql://app:pw@127.0.0.1:1/jobs")
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("supervisor: error: cannot connect")
    assert "pw@" not in result.output


def test_enqueue_without_schema_says_to_migrate(fresh_dsn):
    result = invoke("enqueue", "k", "--dsn", fresh_dsn)
    assert result.exit_code == 1
    assert "supervisor migrate" in result.output
    with psycopg.connect(fresh_dsn) as conn:  # nothing was created behind the user's back
        assert conn.execute("SELECT to_regclass('supervisor.jobs')").fetchone() == (None,)


@pytest.mark.slow
def test_embedded_default_is_announced_migrated_and_stopped_afterwards():
    import os
    import shutil
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    # Not tmp_path: as root the server runs as another user, who must traverse every
    # parent of the data dir (they are never opened for it: issue 50).
    root = Path(tempfile.mkdtemp(prefix="supervisor-cli-"))
    root.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("SUPERVISOR_DSN", "DATABASE_URL")}
    env["SUPERVISOR_EMBEDDED_DIR"] = str(root / "pgdata")
    try:
        command = [sys.executable, "-m", "supervisor", "enqueue", "hello", "--args", '{"n": 1}']
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "1"
        assert done.stderr.strip().splitlines() == [
            f"supervisor: using embedded PostgreSQL, data in {root / 'pgdata'}"]
        assert not (root / "pgdata" / "postmaster.pid").exists(), "server left running"
    finally:
        shutil.rmtree(root, ignore_errors=True)
