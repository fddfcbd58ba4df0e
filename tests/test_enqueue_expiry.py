"""Expiry at enqueue (issue 28): every form stores expires_at (the async API, COPY,
keyed batches, the CLI, plain SQL), and bad values are refused in one line with
nothing stored. Expiry goes with batches and dependencies too (schema 0021)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner

from shared.batches import Callback
from shared.enqueue import enqueue, enqueue_many
from shared.producers.aio import enqueue_async
from supervisor.cli.main import main

pytestmark = pytest.mark.timeout(60)


def seconds_left(conn, ids) -> list[float]:
    rows = conn.execute("SELECT extract(epoch FROM expires_at - created_at)::float8 FROM "
                        "supervisor.jobs WHERE id = ANY(%s) ORDER BY id", (list(ids),))
    return [round(r[0]) for r in rows]


def test_every_form_stores_the_expiry(conn, dsn):
    one = enqueue("k", {}, conn=conn, expires_in=600)
    at = enqueue("k", {}, conn=conn, expires_at=datetime.now(UTC) + timedelta(seconds=300))
    delayed = enqueue("k", {}, conn=conn, expires_in=60, delay=5)  # counts from enqueue
    copied = enqueue_many("k", [{}, {}], conn=conn, expires_in=30)
    keyed = enqueue_many("k", [{}, {}], conn=conn, expires_in=30, unique_keys=["a", "b"])
    aio = asyncio.run(enqueue_async("k", {}, dsn=dsn, expires_in=45))
    plain = enqueue("k", {}, conn=conn)
    assert seconds_left(conn, [one, at, delayed]) == [600, 300, 60]
    assert seconds_left(conn, copied + keyed + [aio]) == [30, 30, 30, 30, 45]
    assert conn.execute("SELECT expires_at FROM supervisor.jobs WHERE id = %s",
                        (plain,)).fetchone()[0] is None
    out = CliRunner().invoke(main, ["enqueue", "k", "--expires-in", "90", "--dsn", dsn])
    assert out.exit_code == 0, out.output
    assert seconds_left(conn, [int(out.output)]) == [90]


@pytest.mark.parametrize("options, message", [
    ({"expires_in": 0}, "expires_in must be a number of seconds > 0, not 0"),
    ({"expires_in": -5}, "expires_in must be a number of seconds > 0, not -5"),
    ({"expires_in": float("inf")}, "expires_in must be a number of seconds > 0"),
    ({"expires_at": datetime(2001, 1, 1, tzinfo=UTC)}, "is in the past"),
    ({"expires_at": datetime(2099, 1, 1)}, "expires_at must be a timezone-aware datetime"),
    ({"expires_in": 5, "expires_at": datetime(2099, 1, 1, tzinfo=UTC)},
     "give either expires_in or expires_at, not both"),
])
def test_bad_expiry_is_refused_and_nothing_is_stored(conn, options, message):
    for call in (lambda: enqueue("k", {}, conn=conn, **options),
                 lambda: enqueue_many("k", [{}], conn=conn, **options)):
        with pytest.raises(ValueError, match=message.replace("(", r"\(")):
            call()
    assert conn.execute("SELECT count(*) FROM supervisor.jobs").fetchone()[0] == 0


@pytest.mark.parametrize("args, message", [
    (["--expires-in", "0"], "--expires-in must be a number of seconds > 0"),
    (["--expires-at", "2001-01-01T00:00:00+00:00"], "is in the past"),
    (["--expires-at", "2099-01-01T00:00:00"], "--expires-at needs a UTC offset"),
    (["--expires-at", "tomorrow"], "--expires-at is not an ISO-8601 moment"),
])
def test_the_cli_refuses_bad_expiry_in_one_line(conn, dsn, args, message):
    out = CliRunner().invoke(main, ["enqueue", "k", *args, "--dsn", dsn])
    assert out.exit_code == 2
    assert message in out.output and len(out.output.strip().splitlines()) == 1
    assert conn.execute("SELECT count(*) FROM supervisor.jobs").fetchone()[0] == 0


def test_expiry_is_stored_with_a_batch_and_with_dependencies(conn):
    # Refused until schema 0021 made 'expired' final for batches and dependencies.
    batch = enqueue_many("k", [{}, {}], conn=conn, expires_in=40, then=Callback("cb", {}))
    first = enqueue("k", {}, conn=conn)
    held = enqueue("k", {}, conn=conn, expires_in=50, depends_on=[first])
    assert seconds_left(conn, [*batch.ids, held]) == [40, 40, 50]
