-- 0024: the keyed claim honours a supervisor's bounds (issue 45).
-- A supervisor that met a job beyond its whole budget (cpus or memory it can never
-- reserve) claims with bounds from then on, so that job is left for a supervisor that
-- can hold it (0017, docs/admission.md). The claim of a queue with a per-key limit runs
-- in claim_keyed(), which took no bounds: the too-big job was claimed, released and
-- claimed again about 400 times a second, each release waking the next claim. This
-- overload takes the bounds beside the aging (0 or NULL: no aging) and applies them in
-- every scan that chooses candidates, under the same advisory lock as the others.
CREATE FUNCTION supervisor.claim_keyed(
    p_queue text, p_kinds text[], p_limit integer, p_per_key integer, p_owner text,
    p_ttl double precision, p_kind_attempts integer[], p_default_attempts integer,
    p_aging double precision, p_max_cpus integer, p_max_memory bigint)
RETURNS TABLE (id bigint, kind text, queue text, attempt integer, max_attempts integer,
               priority integer, timeout double precision, args text,
               wait double precision)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('supervisor.claim_keyed'), hashtext(p_queue));
    IF p_aging IS NULL OR p_aging <= 0 THEN
        RETURN QUERY
        WITH busy AS (
            SELECT r.concurrency_key AS key, count(*)::integer AS n
            FROM supervisor.jobs r
            WHERE r.state = 'running' AND r.queue = p_queue AND r.concurrency_key IS NOT NULL
            GROUP BY r.concurrency_key),
        -- Jobs of keys already at their limit are skipped in the ordered scan, so one busy
        -- key's backlog never hides the others' jobs. The window is wider than the claim
        -- because the per-key cap below may drop some of it.
        head AS (
            SELECT j.id AS jid, j.concurrency_key AS key, j.priority AS prio, j.run_at AS due
            FROM supervisor.jobs j
            WHERE j.state = 'available' AND j.queue = p_queue AND j.kind = ANY(p_kinds)
              AND j.run_at <= now()
              AND (j.expires_at IS NULL OR j.expires_at > now())
              AND coalesce(j.cpus, 1) <= p_max_cpus
              AND (j.memory IS NULL OR j.memory <= p_max_memory)
              AND NOT EXISTS (SELECT 1 FROM supervisor.queues q WHERE q.name = p_queue AND q.paused)
              AND (j.concurrency_key IS NULL OR NOT (j.concurrency_key = ANY(ARRAY(
                      SELECT b.key FROM busy b WHERE b.n >= p_per_key))))
            ORDER BY j.priority, j.run_at, j.id
            LIMIT p_limit * 4 + 16),
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
        RETURN;
    END IF;
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
              AND (j.expires_at IS NULL OR j.expires_at > now())
              AND coalesce(j.cpus, 1) <= p_max_cpus
              AND (j.memory IS NULL OR j.memory <= p_max_memory)
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
              AND (j.expires_at IS NULL OR j.expires_at > now())
              AND coalesce(j.cpus, 1) <= p_max_cpus
              AND (j.memory IS NULL OR j.memory <= p_max_memory)
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
