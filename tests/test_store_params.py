"""Each store statement takes one frozen params record (issue 41, River's riverdriver
style), and what the record binds is exactly what the statement names: no placeholder
left unfilled, none filled for nothing. Checked against a recording connection, with no
database: the statements themselves are pinned elsewhere (tests/test_claim_sql.py, and
every statement's own tests against PostgreSQL)."""

from __future__ import annotations

import re
from dataclasses import FrozenInstanceError
from typing import Any

import pytest

from supervisor.breaker import BreakerSettings
from supervisor.db import (
    CrashCount,
    Heartbeat,
    KindPause,
    LaterWork,
    Prune,
    PruneBatches,
    Renewal,
    Rescued,
    Snooze,
    Store,
    TrippedKind,
)
from supervisor.db import sql as statements


def placeholders(statement: str) -> set[str]:
    return set(re.findall(r"%\((\w+)\)s", statement))


class Answer:
    """What a recorded statement answers: fixed rows."""

    def __init__(self, rows: list[tuple]) -> None:
        self.rows = rows
        self.rowcount = len(rows)

    def __iter__(self):
        return iter(self.rows)

    def fetchall(self) -> list[tuple]:
        return self.rows

    def fetchone(self) -> tuple | None:
        return self.rows[0] if self.rows else None


class RecordingConnection:
    """Records each statement with its parameters and answers the rows queued for it."""

    def __init__(self, answers: dict[str, list[tuple]] | None = None) -> None:
        self.answers = answers or {}
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def execute(self, statement: str, params: dict[str, Any] | None = None,
                prepare: bool | None = None) -> Answer:
        self.sent.append((statement, params or {}))
        return Answer(self.answers.get(statement, []))


def store_on(conn: RecordingConnection) -> Store:
    return Store(conn, "me", lease_ttl=12.0)  # type: ignore[arg-type]


@pytest.mark.parametrize(("record", "statement"), [
    (Heartbeat("host", 7, ["default"], 4, 1, {"x": 1}), statements.BEAT),
    (Prune(True, 60.0, 10), statements.PRUNE_DONE),
    (Prune(False, 120.0, 10, 1.7e9), statements.PRUNE_DISCARDED),
    (PruneBatches(60.0, 10), statements.PRUNE_BATCHES),
    (CrashCount(["k"], BreakerSettings(failures=2, window=60.0, cooldown=30.0)),
     statements.KIND_CRASHES),
])
def test_a_params_record_binds_exactly_its_statements_placeholders(record, statement):
    bound = record.bind("me") if isinstance(record, Heartbeat) else record.bind()
    assert set(bound) == placeholders(statement)


def test_params_records_are_frozen():
    prune = Prune(True, 60.0, 10)
    with pytest.raises(FrozenInstanceError):
        prune.batch = 1  # type: ignore[misc]


def test_a_prune_binds_its_own_age_and_scans_everything_unless_given_a_floor():
    assert Prune(done=False, age=3.0, batch=5).bind() == {
        "age": 3.0, "batch": 5, "floor": float("-inf")}
    assert Prune(done=True, age=7.0, batch=5, floor=12.5).bind()["floor"] == 12.5


def test_a_heartbeat_binds_its_info_as_json_under_the_owners_id():
    bound = Heartbeat("h", 7, ("a", "b"), 4, 1, {"x": 1}).bind("me")
    assert bound == {"id": "me", "host": "h", "pid": 7, "queues": ["a", "b"],
                     "children": 4, "busy": 1, "info": '{"x":1}'}


def test_a_renewal_carries_its_own_progress_and_checkpoint_column_by_column():
    conn = RecordingConnection({statements.RENEW: [(1,)]})
    fenced = store_on(conn).renew([Renewal(1, 3, progress={"done": 2}),
                                   Renewal(2, 1, checkpoint='{"at":5}')])
    assert fenced == [2]
    statement, params = conn.sent[0]
    assert statement == statements.RENEW
    assert placeholders(statement) <= set(params)
    assert params["ids"] == [1, 2] and params["attempts"] == [3, 1]
    assert params["progress"] == ['{"done":2}', None]
    assert params["checkpoints"] == [None, '{"at":5}']
    assert params["ttl"] == 12.0 and params["owner"] == "me"


def test_a_snooze_delay_never_goes_below_now():
    conn = RecordingConnection({statements.SNOOZE: [(1,), (2,), (3,)]})
    assert store_on(conn).snooze([Snooze(1, 1, 30.0), Snooze(2, 1, None),
                                  Snooze(3, 1, -5.0)]) == []
    statement, params = conn.sent[0]
    assert placeholders(statement) <= set(params)
    assert params["delays"] == [30.0, 0.0, 0.0]


def test_empty_batches_send_nothing():
    conn = RecordingConnection()
    store = store_on(conn)
    assert store.renew([]) == [] and store.snooze([]) == []
    assert conn.sent == []


def test_rows_read_back_are_typed_records():
    rescue = [(4, "gone", True)]
    crashes = [("k", 3)]
    pauses = [("k", "paused by hand", None)]
    conn = RecordingConnection({statements.RESCUE: rescue, statements.KIND_CRASHES: crashes,
                                statements.PAUSED_KINDS: pauses,
                                statements.LEFT_FOR_LATER: [(2, None)]})
    store = store_on(conn)
    assert store.rescue_expired() == [Rescued(4, "gone", True)]
    limits = BreakerSettings(failures=2, window=60.0, cooldown=30.0)
    assert store.record_crashes(["k", "k", "k"], limits) == [TrippedKind("k", 3)]
    # The tripped kind's counted crashes are cleared over the same window.
    assert conn.sent[-1] == (statements.KIND_CRASHES_CLEAR, {"kinds": ["k"], "window": 60.0})
    assert store.paused_kinds() == {"k": KindPause("paused by hand", None)}
    assert store.left_for_later(["default"], ["k"]) == LaterWork(2, None)
