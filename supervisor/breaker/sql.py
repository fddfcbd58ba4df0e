"""The breaker's admin statements (``supervisor kinds``) over supervisor.kind_pauses and
supervisor.kind_crashes (0017); what a supervisor runs is in ``supervisor.db.sql``."""

LIST = """
SELECT p.kind, p.reason, p.paused_at, p.paused_until, p.crashes,
       p.paused_until IS NULL OR p.paused_until > now() AS paused
FROM supervisor.kind_pauses p
ORDER BY p.kind
"""

PAUSE = """
INSERT INTO supervisor.kind_pauses (kind, paused_until, reason)
VALUES (%(kind)s, CASE WHEN %(seconds)s::float8 IS NULL THEN NULL
                       ELSE now() + %(seconds)s::float8 * interval '1 second' END,
        %(reason)s)
ON CONFLICT (kind) DO UPDATE
SET paused_until = EXCLUDED.paused_until, reason = EXCLUDED.reason, paused_at = now()
RETURNING kind
"""

RESUME = """
WITH gone AS (DELETE FROM supervisor.kind_pauses WHERE kind = %(kind)s RETURNING kind),
cleared AS (DELETE FROM supervisor.kind_crashes WHERE kind = %(kind)s)
SELECT count(*) FROM gone
"""
