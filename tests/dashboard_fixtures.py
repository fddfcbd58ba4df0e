"""Fixtures of the dashboard's test modules, loaded there with
``pytest_plugins = ["dashboard_fixtures"]``: a seeded database of the module's own and
dashboard processes over it, one with the operator token and one read-only; and
``browser``, a headless Chromium."""

from __future__ import annotations

import pgharness
import psycopg
import pytest
from dashboard_browser import start_browser
from dashboard_seed import PROXIED_HOST, TOKEN, DashboardProcess, seed, seed_pages


@pytest.fixture(scope="module")
def seeded(pg_base_dsn, _migrated_template):
    """A database of this module's own, seeded: ``(dsn, ids)``."""
    name = pgharness.unique_name("supervisor_dash")
    dsn = pgharness.create_database(pg_base_dsn, name, template=_migrated_template)
    with psycopg.connect(dsn, autocommit=True) as conn:
        ids = seed(conn)
    try:
        yield dsn, ids
    finally:
        pgharness.drop_database(pg_base_dsn, name)


@pytest.fixture(scope="module")
def acting(seeded):
    """A dashboard over ``seeded`` whose actions need ``TOKEN``."""
    server = DashboardProcess(seeded[0], TOKEN)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def read_only(seeded):
    """A dashboard over ``seeded`` started without a token, answering the Host name
    ``PROXIED_HOST`` too (as behind a reverse proxy)."""
    server = DashboardProcess(seeded[0], None, extra_args=("--allowed-host", PROXIED_HOST))
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def pages(pg_base_dsn, _migrated_template):
    """``(dashboard with the token, dsn, ids)`` over a database of this module's own."""
    name = pgharness.unique_name("supervisor_pages")
    dsn = pgharness.create_database(pg_base_dsn, name, template=_migrated_template)
    with psycopg.connect(dsn, autocommit=True) as conn:
        ids = seed(conn) | seed_pages(conn)
    server = DashboardProcess(dsn, TOKEN)
    try:
        yield server, dsn, ids
    finally:
        server.close()
        pgharness.drop_database(pg_base_dsn, name)


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium (Debian's, never downloaded) for a module's browser tests."""
    pytest.importorskip("selenium")
    driver = start_browser()
    try:
        yield driver
    finally:
        driver.quit()
