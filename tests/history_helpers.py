"""Helpers for the history's tests (``test_history``, ``test_history_writer``)."""

from __future__ import annotations

import psycopg
import pytest

from supervisor.db.history import roll_up


def roll_up_to_now(conn: psycopg.Connection) -> None:
    """Roll up every minute up to the next one, as a leader's rounds would in slices,
    counting each as closed (``lag=-120``), until the mark has caught up; fails the
    test if it never does."""
    for _ in range(1000):
        if not (roll_up(conn, lag=-120) or conn.execute(
                "SELECT rolled_until < date_trunc('minute', now() + interval '2 minutes') "
                "FROM supervisor.rollup_mark").fetchone()[0]):
            return
    pytest.fail("the roll-up mark never caught up")
