"""Edges between jobs: a job held until others end, and what it reads of them.

``depends_on`` holds a job back ('scheduled' at ``HOLD``, with one row per dependency
still to end in ``supervisor.job_dependencies``, schema 0009) until the trigger on
``supervisor.jobs`` has counted every dependency completed, or cancels it when one did
not. An edge may allow its dependency to fail (``Dep(id, allow_failure=True)``, schema
0028): the dependent then runs whatever that dependency's end, and reads it. Edges may
be named (``Dep(id, name="split")``, or ``depends_on={"split": id}``); the dependent
reads its dependencies by id or name (``read_dependencies``, behind
``current_job().dependencies()``).

Every enqueue form takes ``depends_on``; the statements that write held jobs and their
edges are ``shared.producers.held``'s. A dependency that does not exist is refused in
the producer's own transaction, before anything is written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from shared import jobs
from shared.options import Dep
from shared.validation import MAX_KIND

__all__ = ["HOLD", "Dep", "Dependency", "Edges", "check_depends_on", "read_dependencies"]

# Where a held-back dependent waits: far, but finite (the parent subtracts now() from
# the earliest run_at, which PostgreSQL refuses for 'infinity').
HOLD = "9999-12-31 00:00:00+00"


@dataclass(frozen=True)
class Edges:
    """``depends_on`` checked: the dependency ids (sorted, unique), those whose failure
    is allowed, and the names given (name -> id)."""

    ids: list[int]
    allowed: frozenset[int]
    names: dict[str, int]

    @property
    def names_json(self) -> str | None:
        """The names as the ``dependency_names`` column stores them, None for none."""
        return orjson.dumps(self.names).decode() if self.names else None


@dataclass(frozen=True)
class Dependency:
    """A dependency as its dependent reads it: how it ended and what it returned."""

    id: int
    name: str | None  # as given at enqueue, None when the edge was not named
    kind: str | None  # None once the job was pruned (or deleted)
    state: str | None  # 'completed', 'discarded', 'cancelled', 'expired'; None when gone
    result: Any
    error: dict[str, Any] | None  # its last error entry, None when it has none

    @property
    def ok(self) -> bool:
        """It completed (its ``result`` is what its handler returned)."""
        return self.state == jobs.COMPLETED


def _is_job_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**63


def check_depends_on(depends_on: Any) -> Edges:
    """``depends_on`` as ``Edges``: a non-empty list of job ids or ``Dep``s, or a mapping
    of names to ids or ``Dep``s; ``TypeError``/``ValueError`` (one line) otherwise."""
    items: list[tuple[str | None, Any]]
    if isinstance(depends_on, Mapping):
        items = list(depends_on.items())
        for name, _ in items:
            if not isinstance(name, str) or not name:
                raise TypeError(f"depends_on names must be non-empty str, not {name!r}")
    elif isinstance(depends_on, int | str | bytes) or not isinstance(depends_on, Sequence):
        raise TypeError(f"depends_on must be a list of job ids, not {depends_on!r}")
    else:
        items = [(None, item) for item in depends_on]
    if not items:
        raise ValueError(f"depends_on must be a non-empty list of job ids, not {depends_on!r}")
    allowed: set[int] = set()
    names: dict[str, int] = {}
    ids: set[int] = set()
    for key, item in items:
        dep = item if isinstance(item, Dep) else Dep(item)
        name = key if key is not None else dep.name
        if not _is_job_id(dep.id):
            raise ValueError(f"depends_on must be a non-empty list of job ids, "
                             f"not {depends_on!r}")
        if not isinstance(dep.allow_failure, bool):
            raise TypeError(f"allow_failure must be True or False, not {dep.allow_failure!r}")
        if name is not None:
            if not isinstance(name, str) or not name or len(name) > MAX_KIND:
                raise ValueError(f"a dependency's name is a str of 1 to {MAX_KIND} "
                                 f"characters, not {name!r}")
            if names.get(name, dep.id) != dep.id:
                raise ValueError(f"depends_on names {name!r} twice")
            names[name] = dep.id
        ids.add(dep.id)
        if dep.allow_failure:
            allowed.add(dep.id)
    return Edges(sorted(ids), frozenset(allowed), names)


# -- reading them -----------------------------------------------------------------------

_READ = """
SELECT d.id, x.kind, x.state, x.result, x.errors -> -1
FROM supervisor.jobs j
CROSS JOIN LATERAL unnest(j.depends_on) AS d(id)
LEFT JOIN supervisor.jobs x ON x.id = d.id
WHERE j.id = %s
ORDER BY d.id
"""
_NAMES = "SELECT dependency_names FROM supervisor.jobs WHERE id = %s"


def read_dependencies(conn: Any, job_id: int) -> list[Dependency]:
    """Every dependency of job ``job_id`` in id order, as it is now (read on ``conn``, a
    psycopg connection)."""
    names_row = conn.execute(_NAMES, (job_id,)).fetchone()
    by_id = {v: k for k, v in ((names_row and names_row[0]) or {}).items()}
    return [Dependency(dep_id, by_id.get(dep_id), kind, state, result, error)
            for dep_id, kind, state, result, error in conn.execute(_READ, (job_id,))]
