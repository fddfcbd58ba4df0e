-- 0011: priority aging for queues with a per-key limit (the claim builder, issue 25).
-- Until now a queue with --per-key-max-running ignored its `aging` setting: its claim is
-- supervisor.claim_keyed() (0007), which orders by stored priority only. This overload
-- takes the queue's aging (seconds per priority step, > 0) and orders as the aged claim
-- does: priority - floor(waited / aging), then run_at, then id. Under the same advisory
-- lock as the 0007 function, so keyed claims of a queue stay serialised whichever of the
-- two a supervisor runs. (Numbered 0010, not 0009, so it cannot collide with a migration
-- written at the same time.)
--
-- Candidates, as in the aged claim: (a) the first window of the claim index's own order
-- and (b) for each priority level present (a loose index scan), its window of oldest
-- jobs already aged a step; jobs of keys at their limit are skipped in both, so one busy
-- key's backlog never hides the others' jobs. The window is wider than the claim because
-- the per-key cap may drop some of it, as in 0007.
CREATE FUNCTION supervisor.claim_keyed(
    p_queue text, p_kinds text[], p_limit integer, p_per_key integer, p_owner text,
    p_ttl double precision, p_kind_attempts integer[], p_default_attempts integer,
    p_aging double precision)
RETURNS TABLE (id bigint, kind text, queue text, attempt integer, max_attempts integer,
               priority integer, timeout double precision, args text,
               wait double precision)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
    IF p_aging IS NULL OR p_aging <= 0 THEN  -- no aging: the 0007 claim
        RETURN QUERY SELECT * FROM supervisor.claim_keyed(
            p_queue, p_kinds, p_limit, p_per_key, p_owner, p_ttl, p_kind_attempts,
            p_default_attempts);
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('supervisor.claim_keyed'), hashtext(p_queue));
    RETURN QUERY
    WITH RECURSIVE levels(level) AS (
        (SELECT l.priority FROM supervisor.jobs l
         WHERE l.state = 'available' AND l.queue = p_queue ORDER BY l.priority LIMIT 1)
        UNION ALL
        SELECT (SELECT j.priority FROM supervisor.jobs j
                WHERE j.state = 'available' AND j.queue = p_queue AND j.priority > v.level
                ORDER BY j.priority LIMIT 1)
        FROM levels v WHERE v.level IS NOT NULL),
    busy AS (
        SELECT r.concurrency_key AS key, count(*)::integer AS n
        FROM supervisor.jobs r
        WHERE r.state = 'running' AND r.queue = p_queue AND r.concurrency_key IS NOT NULL
        GROUP BY r.concurrency_key),
    candidates AS (
        SELECT c.id AS cid FROM (
            SELECT j.id FROM supervisor.jobs j
            WHERE j.state = 'available' AND j.queue = p_queue AND j.kind = ANY(p_kinds)
              AND j.run_at <= now()
              AND (j.concurrency_key IS NULL
                   OR NOT (j.concurrency_key = ANY(ARRAY(
                          SELECT b.key FROM busy b WHERE b.n >= p_per_key))))
            ORDER BY j.priority, j.run_at, j.id
            LIMIT p_limit * 4 + 16) AS c
        UNION
        SELECT a.id FROM levels CROSS JOIN LATERAL (
            SELECT j.id FROM supervisor.jobs j
            WHERE j.state = 'available' AND j.queue = p_queue AND j.priority = levels.level
              AND j.kind = ANY(p_kinds)
              AND j.run_at <= now() - p_aging * interval '1 second'
              AND (j.concurrency_key IS NULL
                   OR NOT (j.concurrency_key = ANY(ARRAY(
                          SELECT b.key FROM busy b WHERE b.n >= p_per_key))))
            ORDER BY j.run_at, j.id
            LIMIT p_limit * 4 + 16) AS a),
    head AS (
        SELECT j.id AS jid, j.concurrency_key AS key, j.run_at AS due,
               j.priority - floor(extract(epoch FROM now() - j.run_at) / p_aging) AS prio
        FROM supervisor.jobs j
        WHERE j.id = ANY(ARRAY(SELECT cid FROM candidates))
          AND j.state = 'available' AND j.queue = p_queue AND j.run_at <= now()
          AND NOT EXISTS (SELECT 1 FROM supervisor.queues q WHERE q.name = p_queue AND q.paused)),
    picked AS (
        SELECT h.jid FROM (
            SELECT h.*, row_number() OVER (PARTITION BY h.key ORDER BY h.prio, h.due, h.jid)
                        AS nth
            FROM head h) AS h
        LEFT JOIN busy b ON b.key = h.key
        WHERE h.key IS NULL OR h.nth + coalesce(b.n, 0) <= p_per_key
        ORDER BY h.prio, h.due, h.jid
        LIMIT p_limit),
    claimed AS (
        UPDATE supervisor.jobs AS u
        SET state = 'running', attempt = u.attempt + 1, attempted_at = NULL,
            lease_owner = p_owner, lease_expires_at = now() + p_ttl * interval '1 second',
            heartbeat_at = now(),
            max_attempts = coalesce(u.max_attempts, (
                SELECT a.n FROM unnest(p_kinds, p_kind_attempts) AS a(kind, n)
                WHERE a.kind = u.kind), p_default_attempts)
        WHERE u.id = ANY(ARRAY(SELECT jid FROM picked)) AND u.state = 'available'
        RETURNING u.id, u.kind, u.queue, u.attempt, u.max_attempts, u.priority, u.timeout,
                  u.args::text, extract(epoch FROM now() - u.run_at)::float8)
    SELECT * FROM claimed;
END
$$;
