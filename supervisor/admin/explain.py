"""What each live supervisor's tuning rules decide for the queues it serves, as its last
heartbeat published it (``info["explain"]``; see ``supervisor.engine.explain``): the
data of ``supervisor status --explain``.
"""

from __future__ import annotations

from typing import Any

import psycopg

from supervisor.admin.status import live_supervisors


def explain(conn: psycopg.Connection) -> list[dict[str, Any]]:
    """Per live supervisor: ``id``, ``host``, ``pid``, ``heartbeat_age`` and ``queues``
    (per queue served, what its rules decide now and which rule decided each; a
    supervisor too old to publish them has an empty ``queues``)."""
    found = []
    for sup in live_supervisors(conn):
        info = sup.get("info")
        explained = info.get("explain") if isinstance(info, dict) else None
        queues = ({name: said for name, said in explained.items() if isinstance(said, dict)}
                  if isinstance(explained, dict) else {})
        found.append({"id": sup["id"], "host": sup["host"], "pid": sup["pid"],
                      "heartbeat_age": sup["heartbeat_age"], "queues": queues})
    return found
