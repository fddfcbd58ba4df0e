"""The claim builder produces, for each of the claim's variants that existed before it,
the very statement that was measured (tests/claim_statements.sql, recorded from the
hand-made variants): whitespace aside, nothing may change in them by accident."""

import re
from pathlib import Path

import pytest

from supervisor.db import sql

RECORDED = Path(__file__).with_name("claim_statements.sql")


def _normal(text: str) -> str:
    return " ".join(text.split())


def _recorded() -> dict[str, str]:
    parts = re.split(r"^-- @@ (\w+)\n", RECORDED.read_text(), flags=re.M)
    return {name: _normal(body) for name, body in zip(parts[1::2], parts[2::2])}


def _produced() -> dict[str, str]:
    return {
        "claim": sql.CLAIM, "claim_aged": sql.CLAIM_AGED, "claim_keyed": sql.CLAIM_KEYED,
        "complete_and_claim": sql.COMPLETE_AND_CLAIM,
        "complete_and_claim_aged": sql.COMPLETE_AND_CLAIM_AGED,
        "complete_and_claim_keyed": sql.COMPLETE_AND_CLAIM_KEYED,
        "claim_alone_prepared": sql.CLAIM_ALONE_NONBLOCKING.sql.decode(),
        "claim_aged_alone_prepared": sql.CLAIM_AGED_ALONE_NONBLOCKING.sql.decode(),
        "claim_keyed_alone_prepared": sql.CLAIM_KEYED_ALONE_NONBLOCKING.sql.decode(),
        "complete_and_claim_prepared": sql.COMPLETE_AND_CLAIM_NONBLOCKING.sql.decode(),
        "complete_and_claim_aged_prepared": sql.COMPLETE_AND_CLAIM_AGED_NONBLOCKING.sql.decode(),
        "complete_and_claim_keyed_prepared":
            sql.COMPLETE_AND_CLAIM_KEYED_NONBLOCKING.sql.decode(),
    }


@pytest.mark.parametrize("name", sorted(_recorded()))
def test_the_builder_produces_the_recorded_statement(name):
    assert _normal(_produced()[name]) == _recorded()[name]


def test_every_recorded_variant_is_checked():
    assert len(_recorded()) == 12 and set(_recorded()) == set(_produced())
