"""Schema 0031: a change to a kind's pause or a queue's global limits is told on the
settings channel, whoever makes it (the CLI, a breaker, plain SQL), so a listening
supervisor reads those tables when told instead of every second (issue 43)."""

from __future__ import annotations

import psycopg
import pytest

from shared.defaults import SETTINGS_CHANNEL

pytestmark = pytest.mark.timeout(60)


def _heard(listener: psycopg.Connection) -> list[str]:
    return [note.payload for note in listener.notifies(timeout=0.5, stop_after=10)]


def test_every_statement_that_changes_pauses_or_limits_is_told_once(dsn):
    with psycopg.connect(dsn, autocommit=True) as listener, \
            psycopg.connect(dsn, autocommit=True) as writer:
        listener.execute(f"LISTEN {SETTINGS_CHANNEL}")
        writer.execute("INSERT INTO supervisor.kind_pauses (kind, reason) VALUES "
                       "('a', 'by hand'), ('b', 'by hand')")
        assert _heard(listener) == ["kind_pauses"]  # one statement, two rows: one notice
        writer.execute("UPDATE supervisor.kind_pauses SET reason = 'still' WHERE kind = 'a'")
        writer.execute("DELETE FROM supervisor.kind_pauses WHERE kind = 'b'")
        assert _heard(listener) == ["kind_pauses", "kind_pauses"]
        writer.execute("INSERT INTO supervisor.queue_limits (queue, max_running) "
                       "VALUES ('q', 3)")
        writer.execute("TRUNCATE supervisor.kind_pauses")
        assert _heard(listener) == ["queue_limits", "kind_pauses"]
        with writer.transaction():  # told at commit, and not at all when rolled back
            writer.execute("UPDATE supervisor.queue_limits SET max_running = 4")
            assert _heard(listener) == []
        assert _heard(listener) == ["queue_limits"]
        with pytest.raises(ZeroDivisionError), writer.transaction():
            writer.execute("DELETE FROM supervisor.queue_limits")
            raise ZeroDivisionError
        assert _heard(listener) == []
        writer.execute("SELECT * FROM supervisor.queue_limits")  # reads tell nothing
        writer.execute("UPDATE supervisor.queue_limits SET max_running = 5 WHERE false")
        assert _heard(listener) == ["queue_limits"]  # a statement, though no row moved
