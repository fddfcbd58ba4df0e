"""The non-blocking statement runner against a real server, driven by a selector."""

import selectors

import psycopg
import pytest

from supervisor.db.nonblocking import NonBlockingQuery, Prepared

pytestmark = pytest.mark.timeout(30)


def run(query: NonBlockingQuery, sel: selectors.BaseSelector, statement: Prepared, params: dict):
    outcomes = []
    query.send(statement, params, outcomes.append)
    assert query.busy
    while not outcomes:
        for key, mask in sel.select(5):
            key.data.handle_event(key, mask)
    assert not query.busy
    return outcomes[0]


@pytest.fixture
def runner(dsn):
    sel = selectors.DefaultSelector()
    conn = psycopg.connect(dsn, autocommit=True)
    yield NonBlockingQuery(conn, sel), sel, conn
    conn.close()
    sel.close()


def test_named_parameters_become_numbered_once():
    statement = Prepared("SELECT %(a)s, %(b)s, %(a)s")
    assert statement.sql == b"SELECT $1, $2, $1"
    assert statement.values({"b": 2, "a": 1}) == [1, 2]


def test_rows_come_back_typed(runner):
    query, sel, _ = runner
    rows = run(query, sel, Prepared("SELECT x, %(label)s::text FROM unnest(%(ids)s::bigint[]) x"),
               {"ids": [3, 1, 2], "label": "ok"})
    assert rows == [(3, "ok"), (1, "ok"), (2, "ok")]


def test_errors_are_classified_by_sqlstate(runner):
    query, sel, _ = runner
    error = run(query, sel, Prepared("SELECT %(j)s::jsonb"), {"j": '"a\\u0000b"'})
    assert isinstance(error, psycopg.DataError)
    error = run(query, sel, Prepared("SELECT * FROM no_such_table"), {})
    assert isinstance(error, psycopg.errors.UndefinedTable)
    # The connection is still usable after an error.
    assert run(query, sel, Prepared("SELECT %(n)s::int + 1"), {"n": 1}) == [(2,)]


def test_a_dropped_connection_fails_the_statement(runner, dsn):
    query, sel, conn = runner
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
    outcome = None
    try:
        outcome = run(query, sel, Prepared("SELECT 1"), {})
    except psycopg.OperationalError as exc:  # noticed at send: also a clean error
        outcome = exc
    assert isinstance(outcome, psycopg.OperationalError)
