"""Shared fixtures. Database fixtures are lazy: a test that asks for none of them never
starts or touches a PostgreSQL.

* ``pg_base_dsn`` (session): a server to create databases on (see ``pgharness``).
* ``fresh_dsn``: a brand-new empty database for this test, dropped afterwards (on a
  thread of its own: see ``pgharness.LaterDrops``).
* ``dsn``: a brand-new database with the schema migrated (cloned from a template that
  is migrated once per session, so it costs one CREATE DATABASE, made while the test
  before ran: ``pgharness.SpareDatabases``).
* ``conn``: an autocommit psycopg connection to ``dsn``.
* ``throwaway_server``: a private embedded PostgreSQL the test may stop and restart.

The ``unit`` lane (tests needing no database) is listed and checked in ``lanes``;
``SUPERVISOR_TEST_NO_DB=1`` makes every database fixture fail at once.
"""

from __future__ import annotations

from pathlib import Path

import lanes
import pgharness
import psycopg
import pytest

if lanes.no_database():
    lanes.refuse_databases(pgharness)


# The per-test databases are dropped behind the tests (pgharness.LaterDrops); the
# session's fixtures wait for the drops before the template and the server go.
LATER_DROPS = pgharness.LaterDrops()


def pytest_configure(config):
    lanes.check_stale(Path(__file__).parent)


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    report = yield
    lanes.mark_collected(report, Path(__file__).parent)
    return report


@pytest.fixture(scope="session")
def pg_base_dsn():
    dsn, server = pgharness.find_base_dsn()
    try:
        yield dsn
    finally:
        try:
            LATER_DROPS.wait()
        finally:
            if server is not None:
                server.close()


@pytest.fixture(scope="session")
def _migrated_template(pg_base_dsn):
    from shared.migrate import migrate

    name = pgharness.unique_name("supervisor_tmpl")
    template_dsn = pgharness.create_database(pg_base_dsn, name)
    with psycopg.connect(template_dsn, autocommit=True) as conn:
        migrate(conn)
    try:
        yield name
    finally:
        LATER_DROPS.wait()
        pgharness.drop_database(pg_base_dsn, name)


@pytest.fixture(scope="session")
def _spare_databases(pg_base_dsn, _migrated_template):
    spares = pgharness.SpareDatabases(pg_base_dsn, _migrated_template, LATER_DROPS)
    try:
        yield spares
    finally:
        spares.close()


@pytest.fixture
def fresh_dsn(pg_base_dsn):
    name = pgharness.unique_name("supervisor_t")
    yield pgharness.create_database(pg_base_dsn, name)
    LATER_DROPS.drop(pg_base_dsn, name)


@pytest.fixture
def dsn(pg_base_dsn, _spare_databases):
    test_dsn = _spare_databases.take()
    yield test_dsn
    LATER_DROPS.drop(pg_base_dsn, psycopg.conninfo.conninfo_to_dict(test_dsn)["dbname"])


@pytest.fixture
def conn(dsn):
    connection = psycopg.connect(dsn, autocommit=True)
    try:
        yield connection
    finally:
        connection.close()


@pytest.fixture
def throwaway_server():
    server = pgharness.EmbeddedServer()
    try:
        yield server
    finally:
        server.close()
