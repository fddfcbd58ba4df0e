"""The drain's read of each kind's recent run times from the table (issue 47): the 95th
percentile of the last completions measured, and, since the read holds the start of a
drain on the loop's connection, a bound on its time: past it the kinds stay unknown and
the connection goes on as before."""

from __future__ import annotations

import time

import psycopg
import pytest

from supervisor.db import kind_run_p95

pytestmark = pytest.mark.timeout(60)


def finished(conn, kind: str, walls: list[float]) -> None:
    conn.execute(
        "INSERT INTO supervisor.jobs (kind, queue, state, attempt, attempted_at, finished_at,"
        " usage) SELECT %s, 'q', 'completed', 1, now() - interval '1 minute', now(),"
        " jsonb_build_object('wall_seconds', w) FROM unnest(%s::float8[]) AS w",
        (kind, walls))


def test_the_recent_run_times_of_each_kind_with_enough_of_them(conn):
    finished(conn, "resize", [float(i) for i in range(1, 21)])
    finished(conn, "rare", [5.0])
    found = kind_run_p95(conn, ["resize", "rare", "never"], 3)
    assert found == {"resize": 19.0}


def test_a_read_past_its_budget_leaves_the_kinds_unknown_and_the_connection_usable(conn, dsn):
    finished(conn, "resize", [1.0, 2.0, 3.0])
    # Another session holds the table: the read cannot start, and gives up after its
    # budget instead of holding the drain.
    with psycopg.connect(dsn) as other:
        other.execute("LOCK TABLE supervisor.jobs IN ACCESS EXCLUSIVE MODE")
        began = time.monotonic()
        assert kind_run_p95(conn, ["resize"], 3, timeout_ms=200) == {}
        assert time.monotonic() - began < 5.0
    assert kind_run_p95(conn, ["resize"], 3) == {"resize": 3.0}
