"""The claim connection plans its prepared claims once, generically (``Database`` sets
``plan_cache_mode = force_generic_plan`` on it; ``supervisor.db.nonblocking`` says why):
left to choose, PostgreSQL planned every claim carrying writes anew, half of the
server's CPU for a claim of one job. What must hold with the generic plan: every claim
form, a large batch of completions included, still reaches its rows through the
indexes, never a sequential scan of the table, with tens of thousands of jobs waiting."""

from __future__ import annotations

import selectors

import psycopg

from shared.enqueue import enqueue_many
from supervisor.db import Completion, Database
from supervisor.db.claim import ClaimRequest
from supervisor.db.nonblocking import Prepared

BACKLOG = 30_000


def _answer(db: Database, send) -> object:
    out: list = []
    send(out.append)
    while not out:
        for key, mask in db.selector.select(5):
            key.data.handle_event(key, mask)
    assert not isinstance(out[0], Exception), out[0]
    return out[0]


def _scans(conn: psycopg.Connection) -> tuple[int, int]:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    return conn.execute("SELECT seq_scan, idx_scan FROM pg_stat_user_tables "
                        "WHERE relid = 'supervisor.jobs'::regclass").fetchone()


def test_prepared_claims_run_generic_plans_through_the_index(dsn, conn):
    enqueue_many("k", [{}] * BACKLOG, conn=conn)
    conn.execute("ANALYZE supervisor.jobs")
    db = Database(dsn, "me", 30.0, selectors.DefaultSelector(), statement_timeout=10.0)
    db.open()
    try:
        runner = db.claims
        assert runner is not None and runner.prepares
        mode = _answer(db, lambda cb: runner.send(Prepared("SHOW plan_cache_mode"), {}, cb))
        assert mode == [("force_generic_plan",)]
        seq_before, _ = _scans(conn)
        held: dict[str, list] = {"plain": [], "aged": [], "fair": []}
        for _ in range(4):  # prepared at the second use, then executed generically
            for form, request in (("plain", ClaimRequest("default", ["k"], 2)),
                                  ("aged", ClaimRequest("default", ["k"], 2, aging=60)),
                                  ("fair", ClaimRequest("default", ["k"], 2, fair=True))):
                done = [Completion(j.id, j.attempt, '"ok"') for j in held[form]]
                request = ClaimRequest(request.queue, request.kinds, request.limit,
                                       request.aging, fair=request.fair, completions=done)
                result = _answer(db, lambda cb, r=request: db.store.send_claim(runner, r, cb))
                assert result.fenced == [] and len(result.jobs) == 2  # type: ignore[attr-defined]
                held[form] = result.jobs  # type: ignore[attr-defined]
        # A large batch of completions rides the same prepared, generic statement.
        big = _answer(db, lambda cb: db.store.send_claim(
            runner, ClaimRequest("default", ["k"], 40), cb)).jobs  # type: ignore[attr-defined]
        carried = ClaimRequest("default", ["k"], 40,
                               completions=[Completion(j.id, j.attempt, '"ok"') for j in big])
        result = _answer(db, lambda cb: db.store.send_claim(runner, carried, cb))
        assert result.fenced == [] and len(result.jobs) == 40  # type: ignore[attr-defined]
        plans = _answer(db, lambda cb: runner.send(
            Prepared("SELECT sum(generic_plans), sum(custom_plans) FROM pg_prepared_statements"),
            {}, cb))
        _answer(db, lambda cb: runner.send(Prepared("SELECT pg_stat_force_next_flush()"), {}, cb))
        _answer(db, lambda cb: runner.send(Prepared("SELECT 1"), {}, cb))
    finally:
        db.close()
    generic, custom = plans[0]  # type: ignore[index]
    assert generic >= 8 and custom == 0, plans
    seq_after, _ = _scans(conn)
    assert seq_after == seq_before, "a claim scanned supervisor.jobs sequentially"
    done = conn.execute("SELECT count(*) FROM supervisor.jobs WHERE state = 'completed'"
                        ).fetchone()[0]
    # Every claim but each form's last had its completions written, and the 40.
    assert done == 3 * 2 * 3 + 40


def _flushed_scans(db: Database, runner, conn: psycopg.Connection) -> int:
    """Sequential scans of supervisor.jobs so far, the claim connection's included."""
    _answer(db, lambda cb: runner.send(Prepared("SELECT pg_stat_force_next_flush()"), {}, cb))
    _answer(db, lambda cb: runner.send(Prepared("SELECT 1"), {}, cb))
    return _scans(conn)[0]


def test_a_claim_prepared_while_the_table_was_small_is_planned_again_once_it_grew(dsn, conn):
    # A supervisor started before the work came: its claims were prepared, and their
    # generic plans made, while supervisor.jobs was empty. Nothing analyzes the table
    # meanwhile (a server without autovacuum, or the minute before autovacuum comes).
    db = Database(dsn, "me", 30.0, selectors.DefaultSelector(), statement_timeout=10.0)
    db.open()
    try:
        runner = db.claims
        assert runner is not None
        forms = (ClaimRequest("default", ["k"], 2), ClaimRequest("default", ["k"], 2, fair=True))
        for _ in range(3):  # prepared at the second use; generic plans of an empty table
            for request in forms:
                _answer(db, lambda cb, r=request: db.store.send_claim(runner, r, cb))
        enqueue_many("k", [{}] * BACKLOG, conn=conn)

        def claim_each() -> None:
            for request in forms:
                result = _answer(db, lambda cb, r=request: db.store.send_claim(runner, r, cb))
                assert len(result.jobs) == 2  # type: ignore[attr-defined]

        before = _flushed_scans(db, runner, conn)
        claim_each()
        stale = _flushed_scans(db, runner, conn) - before
        # The plans made on the empty table lock and update by a sequential scan (if a
        # later PostgreSQL plans otherwise, this test no longer shows anything: say so).
        assert stale > 0, "the empty table's plans no longer scan it: revisit this test"
        db.refresh_plans()
        before = _flushed_scans(db, runner, conn)
        claim_each()
        claim_each()
        assert _flushed_scans(db, runner, conn) == before, \
            "a claim planned again on the grown table scanned it sequentially"
    finally:
        db.close()
