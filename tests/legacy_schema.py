"""The schema files from before the baseline (0001-0029, folded into 0030_baseline.sql),
read from git history: for the tests and benchmarks that build a database the way the
old code did, then carry it into today's schema."""

from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path

import psycopg

from shared.migrate import _BOOTSTRAP, LAST_LEGACY_COMMIT, LEGACY_LATEST_VERSION, Migration

_REPOSITORY = Path(__file__).resolve().parent.parent
_FILE = re.compile(r"^shared/schema/(\d{4})_([a-z0-9_]+)\.sql$")


def _git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(_REPOSITORY), *args], capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the schema files from before the baseline are read from git "
                           f"commit {LAST_LEGACY_COMMIT}, which this checkout cannot show "
                           f"(a shallow clone?): git {' '.join(args)}: "
                           f"{done.stderr.strip()}")
    return done.stdout


@functools.cache
def legacy_migrations() -> tuple[Migration, ...]:
    """The old files 0001-0029 as they stood at ``LAST_LEGACY_COMMIT``, in order."""
    names = _git("ls-tree", "--name-only", LAST_LEGACY_COMMIT, "shared/schema/").split()
    found = []
    for name in names:
        match = _FILE.match(name)
        if match:
            sql = _git("show", f"{LAST_LEGACY_COMMIT}:{name}")
            found.append(Migration(int(match.group(1)), match.group(2), sql))
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
