"""What an attempt cost and printed, as the completion and failure statements take it:
three numeric arrays for the usage (the statements build the stored object, see
``supervisor.db.sql``) and one text array for the output."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from shared.usage import Usage


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
