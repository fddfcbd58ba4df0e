"""Versioned schema migrations: numbered SQL files in ``shared/schema`` applied in order.

Files are named ``NNNN_name.sql`` and shipped as package data. ``migrate`` applies the
missing ones in one transaction that first takes a transaction-level advisory lock, so
two ``supervisor migrate`` runs (or two supervisors starting at once) serialize: the
second waits, then finds nothing left to do. Each applied file is recorded in
``supervisor.migrations``.

The first file is the baseline (``0030_baseline.sql``): the files 0001-0029 folded into
one before the first release. A database those files carried to 0029 is at the
baseline's shape already; it takes ``upgrade_from_0029.sql`` in the baseline's place,
keeps every row (its 0001-0029 records included) and is recorded at 0030. A database
stopped anywhere before 0029 is refused with the way forward.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

import psycopg

from shared.db import SchemaMissing

# An arbitrary constant naming "the supervisor schema migration" among advisory locks.
MIGRATION_LOCK_KEY = 0x5355_5056_4D49_4752 & 0x7FFF_FFFF_FFFF_FFFF  # "SUPVMIGR"

_FILE_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")

BASELINE_VERSION = 30
"""The first version a fresh database is created at: the old files folded into one."""
LEGACY_LATEST_VERSION = 29
"""The last of the old files: a database at it is upgraded into the baseline in place."""
LAST_LEGACY_COMMIT = "2964f1d20082"
"""A commit whose ``shared/schema`` still holds the old files (0001-0029)."""
_UPGRADE_FILE = "upgrade_from_0029.sql"

_BOOTSTRAP = """
CREATE SCHEMA IF NOT EXISTS supervisor;
CREATE TABLE IF NOT EXISTS supervisor.migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""


@dataclass(frozen=True, slots=True)
class Migration:
    """One versioned SQL file."""

    version: int
    name: str
    sql: str = field(repr=False)


def available_migrations() -> list[Migration]:
    """Every migration shipped with this package, in version order."""
    from importlib import resources

    found = []
    for entry in resources.files("shared").joinpath("schema").iterdir():
        match = _FILE_NAME.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text("utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"duplicate migration versions in shared/schema: {versions}")
    return found


def baseline_upgrade() -> Migration:
    """What a database at the last old version runs in the baseline's place: recorded as
    the baseline's version and name, so the two ways in end at the same row."""
    from importlib import resources

    sql = resources.files("shared").joinpath("schema", _UPGRADE_FILE).read_text("utf-8")
    baseline = available_migrations()[0]
    return Migration(baseline.version, baseline.name, sql)


def pending_migrations(done: set[int]) -> list[Migration]:
    """The migrations a database that recorded versions ``done`` still needs, in order.
    Raises ``SchemaMissing`` for a database the old files left short of their last."""
    available = available_migrations()
    if done and BASELINE_VERSION not in done:
        reached = max(done)
        if reached < LEGACY_LATEST_VERSION:
            raise SchemaMissing(legacy_schema_message(reached))
        if reached == LEGACY_LATEST_VERSION:
            later = [m for m in available if m.version > BASELINE_VERSION]
            return [baseline_upgrade(), *later]
    return [m for m in available if m.version not in done]


def legacy_schema_message(version: int) -> str:
    """One line for a database the old, unfolded files left before their last (0029)."""
    return (f"the supervisor schema is at version {version}, from before the baseline "
            f"({BASELINE_VERSION:04d}) that only a database at {LEGACY_LATEST_VERSION:04d} "
            f"can be upgraded into: run `supervisor migrate` with pg-supervisor at commit "
            f"{LAST_LEGACY_COMMIT} first, then with this one")


def latest_version() -> int:
    """The schema version this code expects: from the files' names alone (every
    ``supervisor run`` asks at start; reading the files, and importlib.resources with
    zipfile for it, cost it a few ms)."""
    directory = os.path.join(os.path.dirname(os.path.abspath(__file__)), "schema")
    try:
        names = os.listdir(directory)
    except OSError:  # not a plain directory (a zip import, say): the resources way
        migrations = available_migrations()
        return migrations[-1].version if migrations else 0
    versions = [int(m.group(1)) for m in map(_FILE_NAME.match, names) if m]
    return max(versions, default=0)


def current_version(conn: psycopg.Connection) -> int | None:
    """The highest applied version, or None when the schema was never migrated."""
    row = conn.execute("SELECT to_regclass('supervisor.migrations') IS NOT NULL").fetchone()
    if not row or not row[0]:
        return None
    row = conn.execute("SELECT max(version) FROM supervisor.migrations").fetchone()
    return row[0] if row and row[0] is not None else None


def migrate(conn: psycopg.Connection) -> list[Migration]:
    """Apply every missing migration; returns those applied (empty when up to date).

    Runs in its own transaction (``conn`` must not be inside one) under an advisory
    lock, so concurrent callers are safe. Idempotent.
    """
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        raise RuntimeError("migrate() needs a connection that is not inside a transaction")
    applied: list[Migration] = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,))
        conn.execute(_BOOTSTRAP)
        done = {row[0] for row in conn.execute("SELECT version FROM supervisor.migrations")}
        for migration in pending_migrations(done):
            conn.execute(migration.sql)  # trusted, shipped SQL
            conn.execute(
                "INSERT INTO supervisor.migrations (version, name) VALUES (%s, %s)",
                (migration.version, migration.name),
            )
            applied.append(migration)
    return applied


def ensure_schema(conn: psycopg.Connection) -> int:
    """Raise ``SchemaMissing`` with a one-line hint unless the schema is fully migrated;
    returns the current version. For commands that must not change the schema."""
    version = current_version(conn)
    expected = latest_version()
    if version is None:
        raise SchemaMissing(
            "the supervisor schema is missing in this database; run `supervisor migrate`"
        )
    if version < expected:
        raise SchemaMissing(
            f"the supervisor schema is at version {version}, this code needs {expected}; "
            "run `supervisor migrate`"
        )
    if version > expected:
        raise SchemaMissing(newer_schema_message(version, expected))
    return version


def newer_schema_message(version: int, expected: int) -> str:
    """One line for a database migrated by newer code than this (a rolled-back deploy)."""
    return (f"the supervisor schema is at version {version}, newer than this code "
            f"(version {expected}): run the pg-supervisor release that migrated it, or a "
            "later one")
