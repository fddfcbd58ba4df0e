"""What an attempt cost and printed, as the completion and failure statements take it.

A failure batch (joined to its rows) takes three numeric arrays for the usage (the
statement builds the stored object) and one text array for the output. A completion
batch reads each row's values at its place in the batch (``supervisor.db.sql``), where
an element of a text array or of an array with NULLs is found by walking the array from
its start: it takes its results, usage and output as JSON arrays instead (an element of
one is found in a few steps), and numbers with no NULLs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import orjson

from shared.usage import Usage

if TYPE_CHECKING:
    from supervisor.db.records import Completion


class Costed(Protocol):
    """A completion or failure: what its attempt cost and printed (None: unknown, or
    nothing)."""

    @property
    def usage(self) -> Usage | None: ...

    @property
    def output(self) -> str | None: ...


def usage_params(items: Sequence[Costed]) -> dict[str, list]:
    """The ``cpus``, ``walls``, ``rss`` and ``outputs`` parameters of ``items``."""
    usages = [item.usage for item in items]
    return {"cpus": [u.cpu_seconds if u is not None else None for u in usages],
            "walls": [u.wall_seconds if u is not None else None for u in usages],
            # floats like the others: the three go as binary float8 arrays
            "rss": [float(u.max_rss_bytes) if u is not None else None for u in usages],
            "outputs": [item.output for item in items]}


def completion_params(completions: Sequence[Completion]) -> dict[str, object]:
    """The batch parameters of ``sql.COMPLETE`` for ``completions``, which must come in
    id order (``records.in_id_order``): ``ids``, ``attempts``, ``ran`` (0 for none),
    and ``results_json``, ``usages_json`` and ``outputs_json``: JSON arrays of one element per job.
    A result is wrapped in an array of one (``[r]``; none, ``[]``), so that a job whose
    result is JSON ``null`` keeps it and one with none stores SQL NULL."""
    return {
        "ids": [c.id for c in completions],
        "attempts": [c.attempt for c in completions],
        "ran": [c.ran or 0.0 for c in completions],
        # result_json is JSON text already: joined, not parsed and dumped again
        "results_json": "[" + ",".join("[]" if c.result_json is None else f"[{c.result_json}]"
                                  for c in completions) + "]",
        "usages_json": orjson.dumps([_usage_object(c.usage) for c in completions]).decode(),
        "outputs_json": orjson.dumps([c.output for c in completions]).decode()}


def _usage_object(usage: Usage | None) -> dict[str, float | int] | None:
    if usage is None:
        return None
    return {"cpu_seconds": usage.cpu_seconds, "wall_seconds": usage.wall_seconds,
            "max_rss_bytes": int(usage.max_rss_bytes)}
