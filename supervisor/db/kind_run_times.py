"""Each kind's recent run times as the table has them, for a drain's stop notices: a
supervisor that has not yet completed a job of a kind itself (it just started, or the
kind is rare) would otherwise tell every running job of that kind it cannot finish, even
one a moment from its end (issue 47).
"""

from __future__ import annotations

from collections.abc import Sequence

import psycopg

# The wall time of each kind's last 200 completions of the last day (through the index
# of finished rows), the 95th percentile of those, as RunTimes computes its own.
KIND_RUN_P95 = """
SELECT k.kind, percentile_disc(0.95) WITHIN GROUP (ORDER BY r.wall)
FROM unnest(%(kinds)s::text[]) AS k(kind)
CROSS JOIN LATERAL (
    SELECT (j.usage->>'wall_seconds')::float8 AS wall FROM supervisor.jobs j
    WHERE j.kind = k.kind AND j.state = 'completed' AND j.usage ? 'wall_seconds'
      AND j.finished_at > now() - interval '1 day'
    ORDER BY j.finished_at DESC
    LIMIT 200) AS r
GROUP BY k.kind
HAVING count(*) >= %(min_samples)s
"""


def kind_run_p95(conn: psycopg.Connection, kinds: Sequence[str],
                 min_samples: int) -> dict[str, float]:
    """The 95th percentile of each of ``kinds``' recent run times, for those with at
    least ``min_samples`` completions measured."""
    if not kinds:
        return {}
    rows = conn.execute(KIND_RUN_P95, {"kinds": list(kinds), "min_samples": min_samples})
    return {kind: float(p95) for kind, p95 in rows if p95 is not None}
