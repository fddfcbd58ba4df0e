"""The claim builder produces, for each of the claim's variants that existed before it,
the very statement that was measured (tests/claim_statements.sql, recorded from the
hand-made variants): whitespace aside, nothing may change in them by accident. And a
claim-time rule is added in one place."""

import re
from pathlib import Path

import pytest

from shared.enqueue import enqueue
from supervisor.db import Attempt, Store, claim
from supervisor.db.claim import ClaimVariant, Shape, claim_prepared, claim_sql

RECORDED = Path(__file__).with_name("claim_statements.sql")


def _normal(text: str) -> str:
    return " ".join(text.split())


def _recorded() -> dict[str, str]:
    parts = re.split(r"^-- @@ (\w+)\n", RECORDED.read_text(), flags=re.M)
    return {name: _normal(body) for name, body in zip(parts[1::2], parts[2::2], strict=True)}


_VARIANTS = {  # name in the recording -> (aged, keyed, shape, prepared form?, fair?)
    "claim": (False, False, Shape.BARE, False),
    "claim_aged": (True, False, Shape.BARE, False),
    "claim_keyed": (False, True, Shape.BARE, False),
    "complete_and_claim": (False, False, Shape.CARRYING, False),
    "complete_and_claim_aged": (True, False, Shape.CARRYING, False),
    "complete_and_claim_keyed": (False, True, Shape.CARRYING, False),
    "claim_alone_prepared": (False, False, Shape.ALONE, True),
    "claim_aged_alone_prepared": (True, False, Shape.ALONE, True),
    "claim_keyed_alone_prepared": (False, True, Shape.ALONE, True),
    "complete_and_claim_prepared": (False, False, Shape.CARRYING, True),
    "complete_and_claim_aged_prepared": (True, False, Shape.CARRYING, True),
    "complete_and_claim_keyed_prepared": (False, True, Shape.CARRYING, True),
    # a fair queue's claim (issue 42): recorded when it was added
    "claim_fair": (False, False, Shape.BARE, False, True),
    "claim_fair_alone_prepared": (False, False, Shape.ALONE, True, True),
    "complete_and_claim_fair_prepared": (False, False, Shape.CARRYING, True, True),
}


def _produced() -> dict[str, str]:
    produced = {}
    for name, (aged, keyed, shape, prepared, *fair) in _VARIANTS.items():
        v = ClaimVariant(aged, keyed, shape, fair=bool(fair and fair[0]))
        produced[name] = claim_prepared(v).sql.decode() if prepared else claim_sql(v)
    return produced


@pytest.mark.parametrize("name", sorted(_recorded()))
def test_the_builder_produces_the_recorded_statement(name):
    assert _normal(_produced()[name]) == _recorded()[name]


def test_every_recorded_variant_is_checked():
    assert len(_recorded()) == 15 and set(_recorded()) == set(_produced())


@pytest.fixture
def a_rule(monkeypatch):
    """A hypothetical claim-time rule, added the way docs/architecture.md says: one entry
    in ``claim.RULES``. Statements are built once, so the cache is cleared around it."""
    monkeypatch.setattr(claim, "RULES", ("priority < 5",))
    claim.claim_sql.cache_clear()
    claim.claim_prepared.cache_clear()
    yield
    claim.claim_sql.cache_clear()
    claim.claim_prepared.cache_clear()


def test_a_claim_time_rule_is_one_entry_and_holds_in_both_orders(a_rule, conn):
    for aged in (False, True):
        for shape in Shape:
            assert "priority < 5" in claim_sql(ClaimVariant(aged, False, shape))
    held = enqueue("k", priority=7, conn=conn)
    conn.execute("UPDATE supervisor.jobs SET run_at = now() - interval '1 hour' "
                 "WHERE id = %s", (held,))  # aged 60 steps: first of all, but held back
    free = enqueue("k", priority=0, conn=conn)
    store = Store(conn, "me")
    assert [j.id for j in store.claim("default", ["k"], 10, aging=60)] == [free]
    store.release([Attempt(free, 1)])
    assert [j.id for j in store.claim("default", ["k"], 10)] == [free]
