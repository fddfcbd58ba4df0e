"""Where the jobs are stored, as ``status`` shows it (issue 40): the hot table, and the
archives that finished jobs move into (schema 0032).

The hot table holds the jobs in flight and those that ended in the last seconds; the
archives hold the rest for their retention. After a held horizon the hot table keeps
the size the hold gave it until the leader gives it back (``supervisor.db.compaction``):
``status`` says so while it is so, with what the rows in it need.
"""

from __future__ import annotations

from typing import Any

import psycopg

from shared.hot_table import swollen

_STORAGE = """
SELECT pg_total_relation_size('supervisor.jobs'),
       coalesce((SELECT n_live_tup FROM pg_stat_user_tables
                 WHERE relid = 'supervisor.jobs'::regclass), 0),
       (SELECT count(*) FROM supervisor.job_archives),
       (SELECT coalesce(sum(pg_total_relation_size(i.inhrelid)), 0) FROM pg_inherits i
        WHERE i.inhparent = 'supervisor.jobs'::regclass),
       (SELECT min(opened_at) FROM supervisor.job_archives)
"""


def storage(conn: psycopg.Connection) -> dict[str, Any]:
    """JSON-ready: ``hot_bytes`` (the hot table with its indexes), ``hot_rows`` (its
    live rows, as the statistics last counted them), ``archives`` (how many),
    ``archived_bytes``, ``archived_since`` (when the oldest archive kept was opened,
    ISO 8601; None without one) and ``swollen`` (the hot table far larger than its rows
    need: what a held horizon leaves until the rewrite)."""
    row = conn.execute(_STORAGE).fetchone()
    assert row is not None  # one row of aggregates
    hot_bytes, hot_rows, archives, archived_bytes, since = row
    return {"hot_bytes": int(hot_bytes), "hot_rows": int(hot_rows),
            "archives": int(archives), "archived_bytes": int(archived_bytes),
            "archived_since": since.isoformat() if since else None,
            # with its indexes, as the leader judges it (supervisor.db.compaction)
            "swollen": swollen(int(hot_bytes), int(hot_rows))}


def describe_storage(found: dict[str, Any] | None) -> str | None:
    """The line ``status`` prints when the hot table is swollen (None: nothing to say)."""
    if not found or not found.get("swollen"):
        return None
    return (f"supervisor.jobs takes {found['hot_bytes'] / 2**20:,.0f} MB for "
            f"{found['hot_rows']:,} jobs in flight or just finished: the space a held "
            "horizon's row versions took, free again once vacuumed; the leader gives it "
            "back once no hold is left (docs/operations.md, 'Finished jobs in archives, "
            "and the hot table's size after a hold')")
