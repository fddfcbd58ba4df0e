"""When ``supervisor.jobs`` (the hot table, without its archives) is swollen: far larger
than the rows in it need, as a held MVCC horizon leaves it (issue 40).

One rule for the leader, which rewrites such a table once no hold is left
(``supervisor.db.compaction``), and for ``status``, which says so meanwhile
(``supervisor.admin.storage``).
"""

from __future__ import annotations

MIN_BYTES = 64 * 2**20
"""Below this the table is left as it is, whatever its rows need."""
RATIO = 8
"""Swollen: the rows need less than a RATIO-th of the table."""
ROW_BYTES = 1024
"""What a row is counted to need, generously (a job row is about 300-400 bytes)."""


def swollen(table_bytes: int, rows: int) -> bool:
    """Whether a table of ``table_bytes`` holding ``rows`` live rows is swollen."""
    return table_bytes >= MIN_BYTES and rows * ROW_BYTES * RATIO < table_bytes
