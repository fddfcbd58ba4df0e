"""Issue 31: the parent's connections are opened together at start (their connects
overlap), with the deadline and the all-or-nothing rule of opening them one by one."""

from __future__ import annotations

import socket

import pytest

from shared.db import DatabaseUnavailable
from supervisor.db.connections import open_connections


def test_every_connection_is_opened_and_named(dsn):
    names = ["supervisor t", "supervisor t claims", "supervisor t listen"]
    conns = open_connections(dsn, names, statement_timeout=2.0)
    try:
        assert len(conns) == 3
        seen = {conn.execute("SHOW application_name").fetchone()[0] for conn in conns}
        assert seen == set(names)
        assert all(conn.autocommit for conn in conns)
        assert conns[0].execute("SHOW statement_timeout").fetchone()[0] == "2s"
    finally:
        for conn in conns:
            conn.close()


def test_a_server_that_never_answers_fails_them_all_within_the_deadline():
    # A socket that accepts connections (the kernel's backlog) and never says a word:
    # a hung server. Nothing is left open.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        with pytest.raises(DatabaseUnavailable, match="did not answer"):
            open_connections(f"postgresql://nobody@127.0.0.1:{port}/x", ["a", "b", "c"],
                             statement_timeout=1.0, deadline=0.5)
