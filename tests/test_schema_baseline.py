"""The baseline (issue 40): one file that builds what the old files 0001-0029 built, and
the upgrade that carries a database those files took to 0029 into it, every row kept.

The old files are kept in tests/schema_before_baseline/ (tests/legacy_schema.py); both
schemas are compared as ``pg_dump --schema-only`` prints them."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Sequence

import pgharness
import psycopg
import pytest
from legacy_schema import migrate_the_old_way

from shared.enqueue import enqueue
from shared.migrate import (
    BASELINE_VERSION,
    LAST_LEGACY_COMMIT,
    available_migrations,
    current_version,
    migrate,
)

pytestmark = pytest.mark.timeout(120)

# The baseline, then what came after it.
EVERY_VERSION = [m.version for m in available_migrations()]
PG_DUMP = shutil.which("pg_dump")
needs_pg_dump = pytest.mark.skipif(PG_DUMP is None, reason="pg_dump is not on PATH")


@pytest.fixture
def second_fresh_dsn(pg_base_dsn):
    """Another brand-new database, no schema, for the side of a comparison."""
    name = pgharness.unique_name("supervisor_t")
    yield pgharness.create_database(pg_base_dsn, name)
    pgharness.drop_database(pg_base_dsn, name)


def schema_of(dsn: str, leave_out: Sequence[str] = ()) -> list[str]:
    """The statements of ``pg_dump --schema-only``, sorted: equal lists are equal schemas
    up to the order they were printed in. ``leave_out``: statements that begin so are
    left out whole (a function's body spans blank lines)."""
    assert PG_DUMP is not None
    dumped = subprocess.run([PG_DUMP, "--schema-only", "--no-owner", "--no-privileges",
                             "--dbname", dsn], check=True, capture_output=True,
                            text=True).stdout
    for start in leave_out:
        at = dumped.find(start)
        assert at >= 0, start
        if "FUNCTION" in start:  # pg_dump quotes a body that holds "$1" with $_$
            end = min(e + len(tag) - 1 for tag in ("\n$$;\n", "\n$_$;\n")
                      if (e := dumped.find(tag, at)) >= 0)
        else:
            end = dumped.find(";\n", at)
        dumped = dumped[:at] + dumped[end + 2:]
    lines = [line for line in dumped.splitlines()
             if not line.startswith(("--", "\\restrict", "\\unrestrict"))]
    return sorted(block.strip() for block in "\n".join(lines).split("\n\n") if block.strip())


def supervisor_migrate(dsn: str) -> subprocess.CompletedProcess[str]:
    """``supervisor migrate`` as an operator runs it."""
    return subprocess.run([sys.executable, "-m", "supervisor", "migrate", "--dsn", dsn],
                          capture_output=True, text=True, timeout=60)


def without_storage_settings(schema: list[str]) -> list[str]:
    """The statements with each table's storage parameters (``WITH (fillfactor=...)``,
    autovacuum settings) left out: what the baseline set beyond the old files."""
    return sorted(re.sub(r"\n\)\nWITH \(.*\);$", "\n);", block) for block in schema)


# What the baseline changed beyond the old files (issues 40 and 42): the keys channel's
# notices name a batch (a fair claim's walk of the batches moves back to it), and a
# batch's close probes its open members from the highest id down, and jobs_fair_idx's
# predicate tests the state through an expression.
CHANGED = ("CREATE FUNCTION supervisor.notify_inserted_jobs()",
           "CREATE FUNCTION supervisor.notify_job_key()",
           "CREATE FUNCTION supervisor.jobs_after_update()",
           "CREATE INDEX jobs_batch_open_idx",
           "CREATE INDEX jobs_fair_idx")
# What a migration after the baseline rewrote (the old files and the baseline have it
# as it was): the keyed claim's statements say FROM ONLY (0032); the kinds' memory keeps
# their recent samples (0033).
REWRITTEN = ("CREATE TABLE supervisor.kind_memory (",
             "CREATE FUNCTION supervisor.claim_keyed(p_queue text, p_kinds text[], "
             "p_limit integer, p_per_key integer, p_owner text, p_ttl double precision, "
             "p_kind_attempts integer[], p_default_attempts integer, p_aging double "
             "precision, p_max_cpus integer, p_max_memory bigint, p_max_resources jsonb)",)
# What migrations after the baseline added (the old files never had it): the settings
# notices (0031), the finished jobs' archives (0032).
LATER = ("CREATE FUNCTION supervisor.notify_settings()",
         "CREATE TRIGGER kind_pauses_notify",
         "CREATE TRIGGER queue_limits_notify",
         "CREATE FUNCTION supervisor.archive_states(",
         "CREATE FUNCTION supervisor.open_job_archive(",
         "CREATE FUNCTION supervisor.archive_finished(",
         "CREATE FUNCTION supervisor.retire_job_archives(",
         "CREATE FUNCTION supervisor.unarchive_jobs(",
         "CREATE TABLE supervisor.job_archives",
         "ALTER TABLE ONLY supervisor.job_archives",
         "CREATE UNIQUE INDEX job_archives_open_idx")


@needs_pg_dump
def test_the_baseline_builds_what_the_old_files_built(fresh_dsn, second_fresh_dsn):
    with psycopg.connect(fresh_dsn, autocommit=True) as old, \
            psycopg.connect(second_fresh_dsn, autocommit=True) as new:
        assert migrate_the_old_way(old)[-1] == BASELINE_VERSION - 1
        old_schema = schema_of(fresh_dsn, CHANGED + REWRITTEN)
        assert [m.version for m in migrate(new)] == EVERY_VERSION
        # and the one row a migration put in: the history's roll-up mark
        for conn in (old, new):
            assert conn.execute("SELECT count(*) FROM supervisor.rollup_mark").fetchone() == (1,)
        migrate(old)  # the upgrade: the storage settings the baseline added
    new_schema = schema_of(second_fresh_dsn)
    assert len(new_schema) > 100  # the comparison compares something
    assert without_storage_settings(old_schema) == \
        without_storage_settings(schema_of(second_fresh_dsn, CHANGED + REWRITTEN + LATER))
    assert schema_of(fresh_dsn) == new_schema
    with psycopg.connect(second_fresh_dsn, autocommit=True) as conn:
        options = conn.execute("SELECT reloptions FROM pg_class "
                               "WHERE oid = 'supervisor.jobs'::regclass").fetchone()[0]
    # room on the page for the claim's and the completion's versions; autovacuum at 1%
    assert {"fillfactor=70", "autovacuum_vacuum_scale_factor=0.01"} <= set(options)


# Rows of every kind a queue at 0029 holds: jobs in each state, with a batch, a
# dependency, a schedule's fires, the history's minutes, limits, breakers, supervisors.
_LIVE_ROWS = """
INSERT INTO supervisor.queues (name, paused) VALUES ('q', false), ('held', true);
INSERT INTO supervisor.queue_limits (queue, per_key_max_running) VALUES ('q', 2);
INSERT INTO supervisor.batches (total, callback_kind, callback_queue, callback_args)
VALUES (3, 'cb', 'q', '{"n": 1}');
INSERT INTO supervisor.jobs (kind, queue, args, batch_id)
SELECT 'member', 'q', jsonb_build_object('i', i), 1 FROM generate_series(1, 3) i;
INSERT INTO supervisor.jobs (kind, queue, state, run_at)
VALUES ('later', 'q', 'scheduled', now() + interval '1 hour');
INSERT INTO supervisor.jobs (kind, queue, state, attempt, lease_owner, lease_expires_at,
                             attempted_at, heartbeat_at)
VALUES ('busy', 'q', 'running', 1, 'sup-1', now() + interval '1 minute', now(), now());
INSERT INTO supervisor.jobs (kind, queue, state, attempt, finished_at, result, errors)
VALUES ('done', 'q', 'completed', 1, now(), '{"ok": true}', '[]'),
       ('failed', 'q', 'discarded', 3, now(),
        NULL, '[{"attempt": 3, "kind": "exception", "message": "boom"}]');
INSERT INTO supervisor.jobs (kind, queue, concurrency_key, unique_key, priority)
VALUES ('keyed', 'q', 'tenant-7', 'once', 5);
INSERT INTO supervisor.schedules (name, kind, queue, every) VALUES ('tick', 'tick', 'q', 60);
INSERT INTO supervisor.schedule_fires (schedule, slot, outcome)
VALUES ('tick', date_trunc('minute', now()), 'fired');
INSERT INTO supervisor.job_minutes (minute, queue, kind, completed, wait_sum, wait_n)
VALUES (date_trunc('minute', now()) - interval '1 minute', 'q', 'done', 1, 0.5, 1);
INSERT INTO supervisor.queue_minutes (minute, queue) VALUES (date_trunc('minute', now()), 'q');
INSERT INTO supervisor.supervisors (id, host, pid) VALUES ('sup-1', 'h', 4242);
INSERT INTO supervisor.kind_pauses (kind, reason) VALUES ('crashy', 'breaker');
INSERT INTO supervisor.kind_crashes (kind) VALUES ('crashy');
INSERT INTO supervisor.kind_memory (kind, peak_bytes) VALUES ('done', 1048576);
"""

_TABLES = """
SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'supervisor' AND c.relkind = 'r' ORDER BY 1
"""


def every_row(conn: psycopg.Connection) -> dict[str, list[str]]:
    """Each table of the schema, its rows as JSON text in a fixed order."""
    tables = [row[0] for row in conn.execute(_TABLES)]
    return {table: [row[0] for row in conn.execute(
        f"SELECT to_jsonb(t)::text FROM supervisor.{table} t ORDER BY 1")]
        for table in tables}


@needs_pg_dump
def test_a_database_at_0029_keeps_every_row_through_the_upgrade(fresh_dsn, second_fresh_dsn):
    with psycopg.connect(fresh_dsn, autocommit=True) as conn:
        migrate_the_old_way(conn)
        conn.execute(_LIVE_ROWS)
        # the dependency edge: a held job waiting on the running one
        busy = conn.execute("SELECT id FROM supervisor.jobs WHERE kind = 'busy'").fetchone()[0]
        enqueue("after", queue="q", depends_on={"first": busy}, conn=conn)
        before = every_row(conn)
        largest_id = conn.execute("SELECT max(id) FROM supervisor.jobs").fetchone()[0]
    assert all(before[t] for t in ("jobs", "batches", "schedules", "schedule_fires",
                                   "job_minutes", "dependents", "job_dependencies"))

    done = supervisor_migrate(fresh_dsn)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"applied {m.version:04d}_{m.name}"
                                        for m in available_migrations()]

    with psycopg.connect(fresh_dsn, autocommit=True) as conn:
        after = every_row(conn)
        assert after.pop("job_archives") == []  # 0032: none yet, nothing moved by migrating
        for row in after["kind_memory"]:  # 0033: no samples yet, the peak kept
            assert '"recent_rss": []' in row, row
        after["kind_memory"] = [row.replace('"recent_rss": [], ', '')
                                for row in after["kind_memory"]]
        recorded, old_records = after.pop("migrations"), before.pop("migrations")
        assert set(old_records) <= set(recorded)  # 0001-0029 stay recorded
        added = sorted(set(recorded) - set(old_records))
        assert len(added) == len(EVERY_VERSION)  # the baseline and every later one
        assert any('"version": 30' in row and '"name": "baseline"' in row for row in added)
        assert after == before
        assert current_version(conn) == EVERY_VERSION[-1]
        new_id = conn.execute("INSERT INTO supervisor.jobs (kind) VALUES ('new') RETURNING id"
                              ).fetchone()[0]
        assert new_id > largest_id  # the sequences came along too
        # and the dependency still releases its dependent when it finishes
        conn.execute("UPDATE supervisor.jobs SET state = 'completed', finished_at = now(), "
                     "lease_owner = NULL, lease_expires_at = NULL WHERE id = %s", (busy,))
        assert conn.execute("SELECT state FROM supervisor.jobs WHERE kind = 'after'"
                            ).fetchone() == ("available",)

    again = supervisor_migrate(fresh_dsn)
    assert again.returncode == 0, again
    assert f"up to date (version {EVERY_VERSION[-1]})" in again.stdout, again

    with psycopg.connect(second_fresh_dsn, autocommit=True) as conn:
        migrate(conn)
    assert schema_of(fresh_dsn) == schema_of(second_fresh_dsn)


def test_a_database_the_old_files_left_short_of_0029_is_refused(fresh_dsn):
    with psycopg.connect(fresh_dsn, autocommit=True) as conn:
        migrate_the_old_way(conn, upto=21)
    done = supervisor_migrate(fresh_dsn)
    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "at version 21, from before the baseline" in lines[0]
    assert LAST_LEGACY_COMMIT in lines[0]
    with psycopg.connect(fresh_dsn, autocommit=True) as conn:
        assert current_version(conn) == 21  # nothing applied, nothing half-done
