"""The schema files from before the baseline (0001-0029, folded into 0030_baseline.sql),
kept as they stood at git commit ``LAST_LEGACY_COMMIT`` in ``schema_before_baseline/``
(copies, so a shallow clone runs these tests too): for the tests and benchmarks that
build a database the way the old code did, then carry it into today's schema."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import psycopg

from shared.migrate import _BOOTSTRAP, LEGACY_LATEST_VERSION, Migration

_FILES = Path(__file__).resolve().parent / "schema_before_baseline"
_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@functools.cache
def legacy_migrations() -> tuple[Migration, ...]:
    """The old files 0001-0029, in order."""
    found = []
    for path in _FILES.iterdir():
        match = _FILE.match(path.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), path.read_text()))
    found.sort(key=lambda m: m.version)
    assert found and found[-1].version == LEGACY_LATEST_VERSION, [m.version for m in found]
    return tuple(found)


def migrate_the_old_way(conn: psycopg.Connection,
                        upto: int = LEGACY_LATEST_VERSION) -> list[int]:
    """Apply the old files the database lacks, up to ``upto``, as the old ``migrate``
    did (one transaction, each recorded); returns the versions applied. ``conn`` is
    autocommit."""
    applied = []
    with conn.transaction():
        conn.execute(_BOOTSTRAP)
        done = {row[0] for row in conn.execute("SELECT version FROM supervisor.migrations")}
        for migration in legacy_migrations():
            if migration.version <= upto and migration.version not in done:
                conn.execute(migration.sql)
                conn.execute("INSERT INTO supervisor.migrations (version, name) "
                             "VALUES (%s, %s)", (migration.version, migration.name))
                applied.append(migration.version)
    return applied
