"""The non-blocking statement runner against a real server, driven by a selector."""

import selectors

import psycopg
import pytest

from supervisor.db.nonblocking import NonBlockingQuery, Prepared

pytestmark = pytest.mark.timeout(30)


def run(query: NonBlockingQuery, sel: selectors.BaseSelector, statement: Prepared, params: dict,
        prepare: bool = False):
    outcomes = []
    query.send(statement, params, outcomes.append, prepare=prepare)
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


SERVER_PREPARED = Prepared("SELECT name FROM pg_prepared_statements ORDER BY name")


def test_a_statement_sent_with_prepare_is_prepared_once_then_only_executed(runner):
    query, sel, _ = runner
    double = Prepared("SELECT %(n)s::bigint * 2")
    assert run(query, sel, double, {"n": 1}, prepare=True) == [(2,)]
    # Its first use went out in one round trip, unprepared (issue 31: the first claim
    # after start-up); from its second use on it is prepared.
    assert [name for name, in run(query, sel, SERVER_PREPARED, {})] == []
    assert run(query, sel, double, {"n": 5}, prepare=True) == [(10,)]
    # A value that dumps as another type (int8, not int2) gets a statement of its own.
    assert run(query, sel, double, {"n": 2**40}, prepare=True) == [(2**41,)]
    assert run(query, sel, double, {"n": 2**41}, prepare=True) == [(2**42,)]
    assert run(query, sel, double, {"n": 7}, prepare=True) == [(14,)]
    names = [name for name, in run(query, sel, SERVER_PREPARED, {})]
    assert names == ["_supervisor_1", "_supervisor_2"]


def test_a_failed_prepared_statement_is_prepared_afresh_under_a_new_name(runner):
    query, sel, _ = runner
    one = Prepared("SELECT %(n)s::int")
    assert run(query, sel, one, {"n": 1}, prepare=True) == [(1,)]  # sent as it is
    assert run(query, sel, one, {"n": 1}, prepare=True) == [(1,)]  # prepared
    run(query, sel, Prepared("DEALLOCATE ALL"), {})  # the server forgets it
    assert isinstance(run(query, sel, one, {"n": 2}, prepare=True), psycopg.Error)
    assert run(query, sel, one, {"n": 3}, prepare=True) == [(3,)]
    assert query.prepares


def test_where_preparing_fails_statements_are_sent_as_they_are(runner):
    query, sel, _ = runner
    # The name the runner will choose is taken, so its PREPARE fails (as behind a
    # pooler that refuses them): the statement still runs, unnamed, and so do the next.
    run(query, sel, Prepared("PREPARE _supervisor_1 AS SELECT 0"), {})
    assert run(query, sel, Prepared("SELECT %(n)s::int"), {"n": 4}, prepare=True) == [(4,)]
    assert query.prepares  # its first use is not prepared
    assert run(query, sel, Prepared("SELECT %(n)s::int"), {"n": 4}, prepare=True) == [(4,)]
    assert not query.prepares
    assert run(query, sel, Prepared("SELECT %(n)s::int + 1"), {"n": 4}, prepare=True) == [(5,)]


def test_with_prepares_off_nothing_is_prepared(runner):
    query, sel, _ = runner
    query.prepares = False
    assert run(query, sel, Prepared("SELECT %(n)s::int"), {"n": 4}, prepare=True) == [(4,)]
    assert run(query, sel, SERVER_PREPARED, {}) == []


def test_a_statement_that_went_out_whole_wakes_the_loop_only_for_its_answer(runner):
    """Issue 43: the socket was watched for writing after every send, so each claim cost
    the loop a turn for the socket's writability before the one for the answer."""
    query, sel, _ = runner
    masks = []
    for prepare in (False, True, True, True):  # plain, sent once, prepared, executed
        outcomes: list = []
        query.send(Prepared("SELECT %(n)s::int + 1"), {"n": 1}, outcomes.append,
                   prepare=prepare)
        while not outcomes:
            for key, mask in sel.select(5):
                masks.append(mask)
                key.data.handle_event(key, mask)
        assert outcomes == [[(2,)]]
    assert not [mask for mask in masks if mask & selectors.EVENT_WRITE]


def test_discarded_plans_are_made_again_from_the_table_as_it_is_now(runner):
    """A generic plan made while a table was empty scans it whole once it is large;
    ``discard_plans`` has the next prepared statement planned again (DISCARD PLANS
    first), under the same name."""
    query, sel, conn = runner
    conn.execute("SET plan_cache_mode = force_generic_plan")
    # Wide rows, as supervisor.jobs has: an empty table is thought to hold a few.
    conn.execute("CREATE TEMP TABLE t (id bigint PRIMARY KEY, v int, pad char(1500))")
    pick = Prepared("SELECT v FROM t WHERE id = ANY(%(ids)s::bigint[])")
    for _ in range(2):  # prepared at its second use, on the empty table
        assert run(query, sel, pick, {"ids": [1]}, prepare=True) == []
    conn.execute("INSERT INTO t SELECT g, g, '' FROM generate_series(1, 10000) g")

    def plan() -> str:
        rows = run(query, sel, Prepared("EXPLAIN EXECUTE _supervisor_1('{7}')"), {})
        return "\n".join(line for line, in rows)

    assert "Seq Scan" in plan()  # the empty table's plan, kept
    query.discard_plans()
    assert run(query, sel, Prepared("SELECT 1"), {}) == [(1,)]  # not prepared: no discard
    assert "Seq Scan" in plan()
    assert run(query, sel, pick, {"ids": [7]}, prepare=True) == [(7,)]
    assert "Index" in plan() and "Seq Scan" not in plan()
    assert [name for name, in run(query, sel, SERVER_PREPARED, {})] == ["_supervisor_1"]
