"""Bounded names and keys (issue 50), against real PostgreSQL.

A 3,000-character concurrency key, kind, queue or unique key is refused at enqueue in
one line by every path (Python, asyncio, bulk, batch callback, the CLI, plain SQL
through schema 0022's CHECKs), and nothing is stored. Rows stored before 0022 that
break its limits are mended by the migration so their queue keeps running, and the
history roll-up and the breaker key a legacy long kind by its short name instead of
failing.
"""

from __future__ import annotations

import asyncio
import os
import random
import string
import subprocess
import sys

import psycopg
import pytest
from e2e import ROOT, TESTS_DIR
from legacy_schema import migrate_the_old_way

from shared import batches
from shared.enqueue import enqueue, enqueue_many
from shared.exitcodes import CLI_USAGE
from shared.migrate import available_migrations, migrate
from shared.producers.aio import enqueue_async
from shared.validation import (
    MAX_CONCURRENCY_KEY,
    MAX_KIND,
    MAX_QUEUE,
    MAX_UNIQUE_KEY,
    short_name,
)
from supervisor.breaker import Breaker, BreakerSettings
from supervisor.db import Store, TrippedKind
from supervisor.db.history import roll_up

pytestmark = pytest.mark.timeout(120)

LONG = "k" * 3000


def count(conn) -> int:
    return conn.execute("SELECT count(*) FROM supervisor.jobs").fetchone()[0]


CASES = [
    ("job kind", lambda dsn, conn: enqueue(LONG, conn=conn)),
    ("queue", lambda dsn, conn: enqueue("k", queue=LONG, conn=conn)),
    ("concurrency_key", lambda dsn, conn: enqueue("k", concurrency_key=LONG, conn=conn)),
    ("unique_key", lambda dsn, conn: enqueue("k", unique_key=LONG, conn=conn)),
    ("concurrency_key", lambda dsn, conn: enqueue_many("k", [{}, {}], conn=conn,
                                                       concurrency_keys=["a", LONG])),
    ("concurrency_key", lambda dsn, conn: enqueue_many("k", [{}], conn=conn,
                                                       concurrency_key=LONG)),
    ("unique_key", lambda dsn, conn: enqueue_many("k", [{}, {}], conn=conn,
                                                  unique_keys=[LONG, "b"])),
    ("job kind", lambda dsn, conn: enqueue_many(LONG, [{}], conn=conn)),
    ("job kind", lambda dsn, conn: enqueue_many("k", [{}], dsn=dsn,
                                                then=batches.Callback(LONG, {}))),
    ("concurrency_key", lambda dsn, conn: asyncio.run(
        enqueue_async("k", concurrency_key=LONG, dsn=dsn))),
    ("queue", lambda dsn, conn: asyncio.run(enqueue_async("k", queue=LONG, dsn=dsn))),
]


@pytest.mark.parametrize(("what", "call"), CASES)
def test_every_python_path_refuses_a_long_name_in_one_line(dsn, conn, what, call):
    with pytest.raises(ValueError) as refused:
        call(dsn, conn)
    message = str(refused.value)
    assert "\n" not in message and len(message) < 200
    assert message.startswith(f"{what} is 3000 characters long, more than the ")
    assert count(conn) == 0


def test_names_at_the_limit_are_accepted(conn):
    job_id = enqueue("k" * MAX_KIND, queue="q" * MAX_QUEUE, conn=conn,
                     concurrency_key="c" * MAX_CONCURRENCY_KEY,
                     unique_key="u" * MAX_UNIQUE_KEY)
    assert count(conn) == 1 and job_id > 0


@pytest.mark.parametrize("option", ["--concurrency-key", "--queue", "--unique-key", "KIND"])
def test_the_cli_refuses_a_long_name_in_one_line(dsn, conn, option):
    args = [LONG] if option == "KIND" else ["k", option, LONG]
    env = dict(os.environ, SUPERVISOR_DSN=dsn,
               PYTHONPATH=os.pathsep.join([str(TESTS_DIR), str(ROOT)]))
    done = subprocess.run([sys.executable, "-m", "supervisor", "enqueue", *args], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == CLI_USAGE, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "3000 characters long" in lines[0]
    assert "Traceback" not in done.stderr
    assert count(conn) == 0


@pytest.mark.parametrize(("column", "constraint"), [
    ("kind", "jobs_kind_length"),
    ("concurrency_key", "jobs_concurrency_key_length"),
    ("unique_key", "jobs_unique_key_length"),
    ("queue", "jobs_queue_check"),
])
def test_plain_sql_is_refused_by_the_schema(conn, column, constraint):
    values = {"kind": "k", "queue": "default", column: LONG}
    with pytest.raises(psycopg.errors.CheckViolation) as refused:
        conn.execute("INSERT INTO supervisor.jobs (kind, queue, concurrency_key, unique_key) "
                     "VALUES (%(kind)s, %(queue)s, %(concurrency_key)s, %(unique_key)s)",
                     {"concurrency_key": None, "unique_key": None, **values})
    assert constraint in str(refused.value)
    assert count(conn) == 0


@pytest.fixture
def legacy(fresh_dsn):
    """A database the old files (git history) took to 0021, before the limits;
    connection autocommit."""
    with psycopg.connect(fresh_dsn, autocommit=True) as conn:
        migrate_the_old_way(conn, upto=21)
        yield conn


def test_the_migration_mends_live_rows_and_their_queue_keeps_running(legacy):
    conn = legacy
    rng = random.Random(50)
    key = "".join(rng.choice(string.ascii_letters) for _ in range(3000))  # incompressible
    kind = "".join(rng.choice(string.ascii_letters) for _ in range(10000))
    ids = [conn.execute("INSERT INTO supervisor.jobs (kind, queue, concurrency_key) "
                        "VALUES ('k', 'q', %s) RETURNING id", (key,)).fetchone()[0]
           for _ in range(3)]
    long_unique = conn.execute("INSERT INTO supervisor.jobs (kind, queue, unique_key) VALUES "
                               "('k', 'q', %s) RETURNING id", ("u" * 900,)).fetchone()[0]
    long_kind = conn.execute("INSERT INTO supervisor.jobs (kind, queue) VALUES (%s, 'q') "
                             "RETURNING id", (kind,)).fetchone()[0]
    done = conn.execute("INSERT INTO supervisor.jobs (kind, queue, state, finished_at) "
                        "VALUES (%s, 'q', 'completed', now() - interval '10 minutes') "
                        "RETURNING id",
                        (kind,)).fetchone()[0]
    # Before: a job of that key cannot be marked running (the running key index), so
    # every claim of the queue failed. (Today's claim statement reads columns of later
    # migrations, so the legacy schema is shown failing by the write every claim makes.)
    store = Store(conn, "me")
    conn.execute("INSERT INTO supervisor.queue_limits (queue, per_key_max_running) "
                 "VALUES ('q', 2)")
    with pytest.raises(psycopg.errors.ProgramLimitExceeded):
        conn.execute("UPDATE supervisor.jobs SET state = 'running', attempt = 1, "
                     "lease_owner = 'me', lease_expires_at = now() + interval '1 minute', "
                     "heartbeat_at = now() WHERE id = %s", (ids[0],))
    assert 22 in migrate_the_old_way(conn)  # and the rest of the old files
    assert [m.version for m in migrate(conn)] == [m.version for m in available_migrations()]
    keys = {r[0] for r in conn.execute("SELECT concurrency_key FROM supervisor.jobs "
                                       "WHERE id = ANY(%s)", (ids,))}
    assert keys == {short_name(key)}
    claimed = store.claim("q", ["k"], 5, per_key=2)
    assert len([j for j in claimed if j.id in ids]) == 2  # the shared key still limits
    assert long_unique in {j.id for j in claimed}
    state, errors = conn.execute("SELECT state, errors FROM supervisor.jobs WHERE id = %s",
                                 (long_kind,)).fetchone()
    assert state == "discarded" and "more than the 255 allowed" in errors[-1]["message"]
    # A finished legacy row stays as it was, and the history rolls it up by short name.
    assert conn.execute("SELECT char_length(kind) FROM supervisor.jobs WHERE id = %s",
                        (done,)).fetchone()[0] == 10000
    conn.execute("UPDATE supervisor.rollup_mark SET rolled_until = now() - interval '1 hour'")
    while roll_up(conn, lag=0, slice_seconds=3600):
        pass
    kinds = dict(conn.execute("SELECT kind, completed + discarded FROM supervisor.job_minutes"))
    assert kinds == {short_name(kind): 1}


def test_the_breaker_records_and_pauses_a_legacy_long_kind(legacy):
    conn = legacy
    migrate_the_old_way(conn)
    migrate(conn)
    store = Store(conn, "me")
    breaker = Breaker(BreakerSettings(failures=2, window=60.0, cooldown=60.0))
    long_kind = "".join(random.Random(7).choice(string.ascii_letters) for _ in range(10000))
    for _ in range(3):
        breaker.crashed(long_kind)
    breaker.crashed("short")
    tripped = breaker.record(store)
    assert tripped == [TrippedKind(short_name(long_kind), 3)]
    breaker.refresh(store)
    assert breaker.active([long_kind, "short"]) == ["short"]


def test_short_name_keeps_names_within_the_limit():
    assert short_name("k") == "k"
    assert short_name("k" * 255) == "k" * 255
    assert len(short_name("k" * 256)) == 233


def test_short_name_is_the_same_in_python_and_sql(conn):
    for name in ("k", "é" * 300, "k" * 3000, "\U0001d41a" * 1000):
        assert conn.execute("SELECT supervisor.short_name(%s)", (name,)).fetchone()[0] == \
            short_name(name)


def test_a_schedule_of_a_long_kind_is_refused_in_one_line():
    from shared.schedules import ScheduleError, make_spec

    with pytest.raises(ScheduleError) as refused:
        make_spec("nightly", LONG, every=60)
    assert str(refused.value) == ("schedule 'nightly': kind is 3000 characters long, more "
                                  "than the 255 allowed")
