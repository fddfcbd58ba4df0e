"""Every write for running jobs reaches its rows by their ids, whatever the planner
believes of the table or of the batch (issue 40).

Under a held MVCC horizon a VACUUM of ``supervisor.jobs`` counts the few live rows among
a million dead versions and sets the table's estimate to about one row. Until the next
ANALYZE, a write that reached its rows by a join ("j.id = u.id") was planned as one scan
of the whole table or of its primary key: a carrying claim on the loop's connection took
400 ms (two full scans of the primary key, 2.2 million entries) in a 7-minute hold at
1,000 jobs/s. These tests make the planner believe the same (``pg_class.reltuples`` of
the table and of its primary key set to 1, inside a transaction that is rolled back)
and read each write's plan: no sequential scan of the table, and every scan of its
primary key bounded by an index condition. And the fenced writes meet their rows with
no join at all (each row's values read at its place in the batch), so no generic plan
can join them pair by pair either.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import orjson
import psycopg
import pytest

from shared.enqueue import enqueue_many
from supervisor.db import claim, sql
from supervisor.db.attempt_cost import completion_params
from supervisor.db.records import Attempt, Completion

OWNER = "me"
RUNNING = 300
BATCH = 40


@pytest.fixture
def running(conn: psycopg.Connection) -> list[int]:
    """A table with pages to scan (20,000 jobs) and ``RUNNING`` of them running here."""
    if not conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user"
                        ).fetchone()[0]:
        pytest.skip("forging the planner's statistics needs a superuser")
    enqueue_many("k", [{}] * 20_000, conn=conn)
    enqueue_many("keyed", [{}] * 50, concurrency_key="a", conn=conn)
    ids = [row[0] for row in conn.execute(
        "UPDATE ONLY supervisor.jobs SET state = 'running', attempt = 1, lease_owner = %s, "
        "lease_expires_at = now() + interval '1 hour' WHERE id IN (SELECT id FROM ONLY "
        "supervisor.jobs WHERE kind = 'k' ORDER BY id LIMIT %s) RETURNING id",
        (OWNER, RUNNING))]
    conn.execute("ANALYZE supervisor.jobs")
    return sorted(ids)


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)


def _plan(conn: psycopg.Connection, statement: bytes, params: Any, generic: bool = False,
          forged: bool = True) -> dict[str, Any]:
    """The plan of ``statement`` (generic: as the claim connection makes it), under the
    statistics a held horizon's VACUUM leaves unless not ``forged``."""
    cursor = psycopg.ClientCursor(conn)
    cursor.execute("BEGIN")
    try:
        if forged:
            cursor.execute("UPDATE pg_class SET reltuples = 1 WHERE oid IN "
                           "('supervisor.jobs'::regclass, 'supervisor.jobs_pkey'::regclass)")
        if generic:
            cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            cursor.execute(b"PREPARE forged AS " + statement)
            cursor.execute("EXPLAIN (FORMAT JSON) EXECUTE forged("
                           + ", ".join(["%s"] * len(params)) + ")", params)
        else:
            cursor.execute(b"EXPLAIN (FORMAT JSON) " + statement, params)
        (plan,) = cursor.fetchone()
    finally:
        cursor.execute("ROLLBACK")
        if generic:
            cursor.execute("DEALLOCATE ALL")
    return plan[0]["Plan"]


def _unbounded_reads(conn: psycopg.Connection, statement: bytes, params: Any,
                     generic: bool = False) -> list[str]:
    """The plan's reads of ``supervisor.jobs`` not bounded by an index condition, under
    the statistics a held horizon's VACUUM leaves."""
    found = []
    for node in _nodes(_plan(conn, statement, params, generic)):
        kind = node["Node Type"]
        if node.get("Relation Name") == "jobs" and kind == "Seq Scan":
            found.append("Seq Scan on jobs")
        if node.get("Index Name") == "jobs_pkey" and "Index Cond" not in node:
            found.append(f"{kind} on jobs_pkey without a condition")
    return found


def _text(statement: str) -> bytes:
    """``statement`` with its binary parameters as text ones (a client-side cursor)."""
    return re.sub(r"%\((\w+)\)b", r"%(\1)s", statement).encode()


def _params(ids: list[int]) -> dict[str, Any]:
    n = len(ids)
    return {"ids": ids, "attempts": [1] * n, "results": ['"ok"'] * n, "ran": [None] * n,
            "cpus": [None] * n, "walls": [None] * n, "rss": [None] * n,
            "outputs": [None] * n, "owner": OWNER, "started_ids": ids,
            "started_attempts": [1] * n, "kinds": ["error"] * n, "messages": ["m"] * n,
            "tracebacks": [None] * n, "delays": [1.0] * n, "terminal": [False] * n,
            "signatures": [None] * n, "poison_after": [0] * n,
            "progress": [None] * n, "checkpoints": [None] * n, "ttl": 30.0,
            "floor": float("-inf"), "limit": 100, "base": 1.0, "factor": 2.0,
            "cap": 60.0, "jitter": 0.1,
            **completion_params([Completion(i, 1, '"ok"') for i in ids])}


@pytest.mark.parametrize("name", ["COMPLETE", "STARTED", "FAIL", "RELEASE",
                                  "EXPIRE_CLAIMED", "SNOOZE", "INTERRUPT", "RENEW",
                                  "RESCUE"])
def test_a_write_reaches_its_rows_by_their_ids_when_the_table_looks_empty(
        conn, running, name):
    statement = getattr(sql, name)
    for size in (1, BATCH, RUNNING):
        assert _unbounded_reads(conn, _text(statement), _params(running[:size])) == [], \
            (name, size)


@pytest.mark.parametrize("form", ["plain", "aged", "fair", "keyed"])
def test_a_prepared_claim_carrying_writes_reads_no_more_when_the_table_looks_empty(
        conn, running, form):
    half = len(running) // 2
    request = claim.ClaimRequest(
        "default", ["k", "keyed"], 4, aging=60.0 if form == "aged" else 0.0,
        per_key=1 if form == "keyed" else None, fair=form == "fair",
        completions=[Completion(i, 1, '"ok"') for i in running[:BATCH]],
        starts=[Attempt(i, 1) for i in running[half:half + BATCH]])
    prepared = claim.claim_prepared(claim.variant(request, blocking=False))
    values = prepared.values(claim.params(request, OWNER, 30.0, {}, 3))
    # the generic plan, as the claim connection makes it (force_generic_plan)
    assert _unbounded_reads(conn, prepared.sql, values, generic=True) == []


def test_a_carried_batch_meets_its_rows_without_a_join(conn, running):
    """A claim carrying a large batch on a healthy table with a backlog, planned
    generically as the claim connection plans it: each row's values are read at its
    place in the batch (``sql._by_place``), so there is no join of the batch to its rows
    for a plan to get wrong. Joined by their ids, a generic plan that guessed a row or
    two from the fence's filters tested each of 300 rows against every row of the batch
    (90,000 pairs: 45 ms a claim against 6, and no-op drains at half their rate)."""
    enqueue_many("k", [{}] * 5_000, conn=conn)  # a backlog to claim from
    conn.execute("ANALYZE supervisor.jobs")
    request = claim.ClaimRequest(
        "default", ["k"], 4, completions=[Completion(i, 1, '"ok"') for i in running],
        starts=[Attempt(i, 1) for i in running[:BATCH]])
    prepared = claim.claim_prepared(claim.variant(request, blocking=False))
    plan = _plan(conn, prepared.sql, prepared.values(claim.params(request, OWNER, 30.0, {}, 3)),
                 generic=True, forged=False)
    # the batch as a relation: "Function Scan on u" (the unnest of its arrays)
    batches = [node for node in _nodes(plan) if node["Node Type"] == "Function Scan"
               and re.fullmatch(r"u(_\d+)?", node.get("Alias", ""))]
    assert batches == []


def test_the_writes_still_write_through_the_new_way_in(conn, running):
    """The forged plans are read, not run; these run for real: a completion, a renewal
    and a rescue write exactly their rows."""
    done = conn.execute(sql.COMPLETE, _params(running[:BATCH])).fetchall()
    assert sorted(row[0] for row in done) == running[:BATCH]
    renewed = conn.execute(sql.RENEW, _params(running[BATCH:2 * BATCH])).fetchall()
    assert sorted(row[0] for row in renewed) == running[BATCH:2 * BATCH]
    conn.execute("UPDATE ONLY supervisor.jobs SET lease_expires_at = now() - interval '1 h' "
                 "WHERE id = ANY(%s)", (running[-5:],))
    rescued = conn.execute(sql.RESCUE, {**_params([]), "ttl": 0.0}).fetchall()
    assert sorted(row[0] for row in rescued) == running[-5:]
    assert all(row[2] for row in rescued)  # never started: back unspent
    states = dict(conn.execute("SELECT state, count(*) FROM supervisor.jobs WHERE id = ANY(%s) "
                               "GROUP BY state", (running,)).fetchall())
    assert states == {"completed": BATCH, "running": RUNNING - BATCH - 5, "available": 5}


def test_the_move_to_the_archives_deletes_its_rows_by_their_ids_when_the_table_looks_empty(
        conn, running):
    """The leader's move (``supervisor.archive_finished``, 0034) runs its statements
    inside a function: their plans are read through auto_explain, sent to this session."""
    conn.execute("UPDATE ONLY supervisor.jobs SET state = 'completed', finished_at = now() "
                 "WHERE id IN (SELECT id FROM ONLY supervisor.jobs WHERE state = 'available' "
                 "ORDER BY id LIMIT 2000)")
    plans: list[str] = []
    conn.add_notice_handler(lambda notice: plans.append(notice.message_primary or ""))
    conn.execute("BEGIN")
    try:
        conn.execute("UPDATE pg_class SET reltuples = 1 WHERE oid IN "
                     "('supervisor.jobs'::regclass, 'supervisor.jobs_pkey'::regclass)")
        conn.execute("LOAD 'auto_explain'")
        for setting in ("auto_explain.log_min_duration = 0",
                        "auto_explain.log_nested_statements = on",
                        "auto_explain.log_format = json", "client_min_messages = log"):
            conn.execute(f"SET LOCAL {setting}")
        moved = conn.execute("SELECT sum(moved) FROM supervisor.archive_finished("
                             "86400, 86400, 10000, 0)").fetchone()[0]
    finally:
        conn.execute("ROLLBACK")
    assert moved == 2000
    deletes = [text for text in plans if "DELETE FROM ONLY supervisor.jobs" in text]
    assert deletes, plans  # the move's own statement was seen
    for text in deletes:
        plan = orjson.loads(text[text.index("{"):])["Plan"]
        for node in _nodes(plan):
            assert not (node.get("Relation Name") == "jobs" and node["Node Type"] == "Seq Scan")
            assert not (node.get("Index Name") == "jobs_pkey" and "Index Cond" not in node)
