"""The breaker's statements (supervisor.kind_crashes and supervisor.kind_pauses, 0017)."""

# Crashes of this turn, one row each; a kind whose crashes within the window (these
# included: a CTE's inserted rows are not visible to the rest of its statement) exceed
# the limit is paused for the cool-down, unless it is paused already. Its crash rows are
# then cleared, so after the cool-down it starts counting afresh.
RECORD = """
WITH added AS (
    INSERT INTO supervisor.kind_crashes (kind)
    SELECT unnest(%(kinds)s::text[])
    RETURNING kind
), counted AS (
    SELECT k.kind,
           (SELECT count(*) FROM supervisor.kind_crashes c
            WHERE c.kind = k.kind AND c.at > now() - %(window)s * interval '1 second')
           + (SELECT count(*) FROM added a WHERE a.kind = k.kind) AS crashes
    FROM (SELECT DISTINCT unnest(%(kinds)s::text[]) AS kind) AS k
)
INSERT INTO supervisor.kind_pauses AS p (kind, paused_until, reason, crashes)
SELECT kind, now() + %(cooldown)s * interval '1 second',
       crashes || ' crashes within ' || %(window)s || ' s (breaker_failures '
       || %(failures)s || ')', crashes
FROM counted WHERE crashes > %(failures)s
ON CONFLICT (kind) DO UPDATE
SET paused_until = EXCLUDED.paused_until, reason = EXCLUDED.reason,
    crashes = EXCLUDED.crashes, paused_at = now()
WHERE p.paused_until IS NOT NULL AND p.paused_until <= now()
RETURNING kind, crashes
"""

CLEAR = """
DELETE FROM supervisor.kind_crashes
WHERE kind = ANY(%(kinds)s::text[]) OR at < now() - %(window)s * interval '1 second'
"""

PAUSED = """
SELECT kind, reason, extract(epoch FROM paused_until - now())::float8
FROM supervisor.kind_pauses
WHERE paused_until IS NULL OR paused_until > now()
"""

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
