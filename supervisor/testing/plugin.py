"""pytest fixtures for code that enqueues jobs and the handlers that run them.

Installed as the ``supervisor`` pytest plugin (entry point ``pytest11``). It only
defines fixtures, all named ``supervisor_*``, and imports nothing of the project until
one is requested: a test suite that asks for none runs exactly as without it (no
option, no hook, no database). ``-p no:supervisor`` turns it off; with
``PYTEST_DISABLE_PLUGIN_AUTOLOAD`` set, ``-p supervisor.testing.plugin`` turns it on.

* ``supervisor_dsn``: the DSN of a migrated database, empty at the start of each test,
  also set as ``SUPERVISOR_DSN`` for the test, so ``handler.enqueue(...)``,
  ``supervisor.wait(...)`` and the helpers below find it without ``conn=``;
* ``supervisor_fresh_dsn``: a brand-new migrated database for this test alone (slower:
  for tests that change the schema or its roles);
* ``supervisor_conn``: an autocommit psycopg connection to ``supervisor_dsn``;
* ``supervisor_drain``, ``supervisor_enqueued``: ``supervisor.testing.drain`` and
  ``enqueued`` bound to that connection.

The server: ``SUPERVISOR_TEST_DSN``, else an embedded PostgreSQL for the session (the
``embedded`` extra). See docs/testing.md.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def supervisor_test_server() -> Iterator[Any]:
    """The PostgreSQL the test databases are made on (``TestServer``)."""
    from supervisor.testing.databases import NoTestServer, TestServer

    try:
        server = TestServer.find()
    except NoTestServer as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def _supervisor_session_database(supervisor_test_server: Any) -> Iterator[tuple[str, Any]]:
    """One migrated database per session (per xdist worker), and its emptier."""
    import psycopg

    from supervisor.testing.databases import Emptier

    server = supervisor_test_server
    name = server.migrated_database()
    dsn = server.dsn_of(name)
    conn = psycopg.connect(dsn, autocommit=True, application_name="supervisor-pytest")
    try:
        yield dsn, Emptier(conn)
    finally:
        conn.close()
        server.drop_database(name)


@pytest.fixture
def supervisor_dsn(_supervisor_session_database: tuple[str, Any],
                   monkeypatch: pytest.MonkeyPatch) -> str:
    """A migrated database with no jobs, batches, queues or schedules (emptied before
    this test), named in ``SUPERVISOR_DSN`` for the test."""
    dsn, emptier = _supervisor_session_database
    emptier.empty()
    monkeypatch.setenv("SUPERVISOR_DSN", dsn)
    return dsn


@pytest.fixture(scope="session")
def _supervisor_template(supervisor_test_server: Any) -> Iterator[str]:
    server = supervisor_test_server
    name = server.migrated_database()
    try:
        yield name
    finally:
        server.drop_database(name)


@pytest.fixture
def supervisor_fresh_dsn(supervisor_test_server: Any, _supervisor_template: str,
                         monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A brand-new migrated database for this test alone, dropped afterwards, named in
    ``SUPERVISOR_DSN`` for the test."""
    server = supervisor_test_server
    name = server.create_database(template=_supervisor_template)
    dsn = server.dsn_of(name)
    monkeypatch.setenv("SUPERVISOR_DSN", dsn)
    try:
        yield dsn
    finally:
        server.drop_database(name)


@pytest.fixture
def supervisor_conn(supervisor_dsn: str) -> Iterator[Any]:
    """An autocommit psycopg connection to ``supervisor_dsn``."""
    import psycopg

    conn = psycopg.connect(supervisor_dsn, autocommit=True)
    try:
        yield conn
    finally:
        conn.close()


@pytest.fixture
def supervisor_drain(supervisor_conn: Any) -> Callable[..., Any]:
    """``supervisor.testing.drain`` on ``supervisor_conn``: ``supervisor_drain()`` runs
    every due job; the same arguments as ``drain``."""
    from supervisor.testing import drain

    return functools.partial(drain, conn=supervisor_conn)


@pytest.fixture
def supervisor_enqueued(supervisor_conn: Any) -> Callable[..., Any]:
    """``supervisor.testing.enqueued`` on ``supervisor_conn``."""
    from supervisor.testing import enqueued

    return functools.partial(enqueued, conn=supervisor_conn)
