-- The supervisor schema, whole: what migrations 0001-0029 built one after the other,
-- folded into one file before the first release (issue 40). `supervisor migrate` runs
-- it on a database that has no schema yet; a database the old files carried to 0029 is
-- already at this shape and takes upgrade_from_0029.sql instead (shared/migrate.py).
-- Each object's history, and the reasons in the old files' comments, are in git:
-- `git log -- 'shared/schema/00*.sql'`.
--
-- The text is pg_dump's rendering of a database migrated through 0029, regrouped per
-- table, so that `pg_dump --schema-only` of a database built from it equals that of a
-- migrated one (tests/test_schema_baseline.py); beyond it, only supervisor.jobs's storage
-- settings (WITH, below), which the upgrade sets too. Hence a few things a fresh file would
-- not choose: CHECKs added to a live table as NOT VALID by 0016/0022 stay NOT VALID
-- (the upgraded databases have them so, and they are enforced on every write either
-- way), and identities and keys come as ALTER TABLE after their table.
--
-- Functions come first, tables after: the tables' triggers name the functions, and the
-- functions' bodies name the tables, so the bodies are checked when first called.
SET LOCAL check_function_bodies = off;

-- ---------------------------------------------------------------- functions

CREATE FUNCTION supervisor.batch_drain(b bigint, cap integer, wait_running boolean) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    bt      supervisor.batches%ROWTYPE;
    why     text;
    told    bigint[];
    changed integer := 0;
    n       integer;
BEGIN
    SELECT * INTO bt FROM supervisor.batches WHERE id = b;
    IF NOT FOUND OR bt.finished_at IS NOT NULL THEN
        RETURN 0;
    END IF;
    IF bt.stopped_at IS NOT NULL THEN
        why := CASE bt.stop_kind WHEN 'aborted' THEN format('batch %s aborted: %s', b, bt.stop_reason)
                                 ELSE format('batch %s cancelled by operator', b) END;
        IF wait_running THEN
            WITH r AS (
                UPDATE supervisor.jobs AS j
                SET state = 'cancelled', finished_at = now(),
                    errors = j.errors || jsonb_build_array(jsonb_build_object(
                        'attempt', j.attempt, 'kind', 'cancelled', 'message', why,
                        'traceback', NULL, 'at', now(), 'supervisor', j.lease_owner)),
                    lease_owner = NULL, lease_expires_at = NULL
                WHERE j.id = ANY(ARRAY(SELECT id FROM supervisor.jobs WHERE batch_id = b
                                 AND state = 'running' ORDER BY id LIMIT cap FOR UPDATE))
                  AND j.state = 'running'
                RETURNING j.id)
            SELECT array_agg(id) INTO told FROM r;
        ELSE
            WITH r AS (
                UPDATE supervisor.jobs AS j
                SET state = 'cancelled', finished_at = now(),
                    errors = j.errors || jsonb_build_array(jsonb_build_object(
                        'attempt', j.attempt, 'kind', 'cancelled', 'message', why,
                        'traceback', NULL, 'at', now(), 'supervisor', j.lease_owner)),
                    lease_owner = NULL, lease_expires_at = NULL
                WHERE j.id = ANY(ARRAY(SELECT id FROM supervisor.jobs WHERE batch_id = b
                                 AND state = 'running' LIMIT cap FOR UPDATE SKIP LOCKED))
                  AND j.state = 'running'
                RETURNING j.id)
            SELECT array_agg(id) INTO told FROM r;
        END IF;
        IF told IS NOT NULL THEN
            PERFORM pg_notify('supervisor_cancel', x::text) FROM unnest(told) AS x;
            changed := cardinality(told);
        END IF;
        UPDATE supervisor.jobs AS j
        SET state = 'cancelled', finished_at = now(),
            errors = j.errors || jsonb_build_array(jsonb_build_object(
                'attempt', j.attempt, 'kind', 'cancelled', 'message', why,
                'traceback', NULL, 'at', now(), 'supervisor', NULL))
        WHERE j.id = ANY(ARRAY(SELECT id FROM supervisor.jobs WHERE batch_id = b
                         AND state IN ('available', 'scheduled', 'retryable')
                       LIMIT cap FOR UPDATE SKIP LOCKED))
          AND j.state IN ('available', 'scheduled', 'retryable');
        GET DIAGNOSTICS n = ROW_COUNT;
        RETURN changed + n;
    END IF;
    IF bt.paused_at IS NOT NULL THEN
        UPDATE supervisor.jobs AS j
        SET state = 'scheduled', run_at = '9999-12-30 00:00:00+00'
        WHERE j.id = ANY(ARRAY(SELECT id FROM supervisor.jobs WHERE batch_id = b
                         AND (state IN ('available', 'retryable')
                              OR (state = 'scheduled'
                                  AND run_at < '9999-12-30 00:00:00+00'))
                       LIMIT cap FOR UPDATE SKIP LOCKED))
          AND j.state IN ('available', 'retryable', 'scheduled');
        GET DIAGNOSTICS n = ROW_COUNT;
        RETURN n;
    END IF;
    RETURN 0;
END
$$;

CREATE FUNCTION supervisor.batch_stop(b bigint, kind text, reason text) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE supervisor.batches
    SET stopped_at = now(), stop_kind = kind, stop_reason = left(reason, 1000)
    WHERE id = b AND stopped_at IS NULL AND finished_at IS NULL;
    RETURN FOUND;
END
$$;

CREATE FUNCTION supervisor.cancel_dependent(p_id bigint, p_dep bigint, p_how text) RETURNS void
    LANGUAGE sql
    AS $$
    DELETE FROM supervisor.dependents WHERE id = p_id;
    DELETE FROM supervisor.job_dependencies WHERE dependent_id = p_id;
    UPDATE supervisor.jobs
    SET state = 'cancelled', finished_at = now(),
        errors = errors || jsonb_build_array(jsonb_build_object(
            'attempt', attempt, 'kind', 'dependency',
            'message', format('dependency %s %s', p_dep, p_how),
            'traceback', NULL, 'at', now(), 'supervisor', NULL))
    WHERE id = p_id AND state = 'scheduled';
$$;

CREATE FUNCTION supervisor.capped_errors(errors jsonb) RETURNS jsonb
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    AS $$
DECLARE
    message_budget constant integer := 98304;
    text_budget constant integer := 262144;
    entry_message constant integer := 16384;
    most_between constant integer := 600;
    n integer := jsonb_array_length(errors);
    messages bigint;
    texts bigint;
    first_entry jsonb;
    last_entry jsonb;
    middle jsonb;
    dropped integer := 0;
    m integer;
    message_room integer;
    text_room integer;
BEGIN
    -- The usual case, cheaply: a value no bigger than the budget in all (not compressed,
    -- as the result of an append is) holds fewer characters than that of any text.
    IF pg_column_compression(errors) IS NULL AND pg_column_size(errors) <= message_budget
    THEN
        RETURN errors;
    END IF;
    SELECT coalesce(sum(char_length(e ->> 'message')), 0),
           coalesce(sum(coalesce(char_length(e ->> 'traceback'), 0)
                        + coalesce(char_length(e ->> 'output'), 0)), 0)
    INTO messages, texts
    FROM jsonb_array_elements(errors) AS e;
    IF messages <= message_budget AND texts <= text_budget THEN
        RETURN errors;
    END IF;
    first_entry := supervisor.cut_entry(errors -> 0, entry_message, 65536);
    IF n = 1 THEN
        RETURN jsonb_build_array(first_entry);
    END IF;
    last_entry := supervisor.cut_entry(errors -> (n - 1), entry_message, 65536);
    m := n - 2;
    IF m > most_between THEN
        dropped := m - most_between;
        m := most_between;
    END IF;
    message_room := greatest((message_budget - char_length(first_entry ->> 'message')
                              - char_length(last_entry ->> 'message')) / greatest(m + 1, 1),
                             64);
    text_room := (text_budget - coalesce(char_length(first_entry ->> 'traceback'), 0)
                  - coalesce(char_length(last_entry ->> 'traceback'), 0)
                  - coalesce(char_length(first_entry ->> 'output'), 0)
                  - coalesce(char_length(last_entry ->> 'output'), 0)) / greatest(m, 1);
    SELECT coalesce(jsonb_agg(supervisor.cut_entry(e, message_room, text_room) - 'output'
                              ORDER BY i), '[]'::jsonb)
    INTO middle
    FROM jsonb_array_elements(errors) WITH ORDINALITY AS t(e, i)
    WHERE i > 1 + dropped AND i < n;
    IF dropped > 0 THEN
        middle := jsonb_build_array(jsonb_build_object(
            'attempt', errors -> 1 -> 'attempt', 'kind', 'trimmed',
            'message', 'the errors of ' || dropped || ' earlier attempts were dropped to '
                       || 'keep the stored error text bounded',
            'traceback', NULL, 'at', errors -> 1 -> 'at')) || middle;
    END IF;
    RETURN jsonb_build_array(first_entry) || middle || jsonb_build_array(last_entry);
END
$$;

CREATE FUNCTION supervisor.claim_keyed(p_queue text, p_kinds text[], p_limit integer, p_per_key integer, p_owner text, p_ttl double precision, p_kind_attempts integer[], p_default_attempts integer) RETURNS TABLE(id bigint, kind text, queue text, attempt integer, max_attempts integer, priority integer, timeout double precision, args text, wait double precision)
    LANGUAGE plpgsql
    AS $$
#variable_conflict use_column
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('supervisor.claim_keyed'), hashtext(p_queue));
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
END
$$;

CREATE FUNCTION supervisor.claim_keyed(p_queue text, p_kinds text[], p_limit integer, p_per_key integer, p_owner text, p_ttl double precision, p_kind_attempts integer[], p_default_attempts integer, p_aging double precision) RETURNS TABLE(id bigint, kind text, queue text, attempt integer, max_attempts integer, priority integer, timeout double precision, args text, wait double precision)
    LANGUAGE plpgsql
    AS $$
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
              AND (j.expires_at IS NULL OR j.expires_at > now())
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

CREATE FUNCTION supervisor.claim_keyed(p_queue text, p_kinds text[], p_limit integer, p_per_key integer, p_owner text, p_ttl double precision, p_kind_attempts integer[], p_default_attempts integer, p_aging double precision, p_max_cpus integer, p_max_memory bigint) RETURNS TABLE(id bigint, kind text, queue text, attempt integer, max_attempts integer, priority integer, timeout double precision, args text, wait double precision)
    LANGUAGE plpgsql
    AS $$
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

CREATE FUNCTION supervisor.claim_keyed(p_queue text, p_kinds text[], p_limit integer, p_per_key integer, p_owner text, p_ttl double precision, p_kind_attempts integer[], p_default_attempts integer, p_aging double precision, p_max_cpus integer, p_max_memory bigint, p_max_resources jsonb) RETURNS TABLE(id bigint, kind text, queue text, attempt integer, max_attempts integer, priority integer, timeout double precision, args text, wait double precision)
    LANGUAGE plpgsql
    AS $$
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
              AND supervisor.resources_fit(j.resources, p_max_resources)
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
              AND supervisor.resources_fit(j.resources, p_max_resources)
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
              AND supervisor.resources_fit(j.resources, p_max_resources)
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

CREATE FUNCTION supervisor.cut_entry(entry jsonb, message_room integer, text_room integer) RETURNS jsonb
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT CASE
        WHEN jsonb_typeof(entry) <> 'object' THEN entry
        WHEN coalesce(char_length(entry ->> 'message'), 0) <= message_room
             AND coalesce(char_length(entry ->> 'traceback'), 0) <= text_room
             AND coalesce(char_length(entry ->> 'output'), 0) <= text_room
        THEN entry
        ELSE entry
             || jsonb_build_object('trimmed', true)
             || CASE WHEN char_length(entry ->> 'message') > message_room
                     THEN jsonb_build_object('message',
                          left(entry ->> 'message', greatest(message_room - 40, 16))
                          || ' [... ' || char_length(entry ->> 'message')
                          || ' characters, cut]')
                     ELSE '{}'::jsonb END
             || CASE WHEN char_length(entry ->> 'traceback') > text_room
                     THEN jsonb_build_object('traceback', CASE WHEN text_room < 200 THEN NULL
                          ELSE '[... cut] ' || right(entry ->> 'traceback', text_room - 20) END)
                     ELSE '{}'::jsonb END
             || CASE WHEN char_length(entry ->> 'output') > text_room
                     THEN jsonb_build_object('output', CASE WHEN text_room < 200 THEN NULL
                          ELSE '[... cut] ' || right(entry ->> 'output', text_room - 20) END)
                     ELSE '{}'::jsonb END
    END
$$;

CREATE FUNCTION supervisor.jobs_after_update() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    b       bigint;
    bt      supervisor.batches%ROWTYPE;
    cb      bigint;
    r       record;
    left_   integer;
    done    bigint[];
    blocked text;
    why     text;
    failed_ boolean;
BEGIN
    -- A claim dropped a member of a stopped or paused batch: settle a chunk of it, so
    -- the claims stop meeting it. Cleared first: the chunk's own UPDATE comes back here.
    blocked := current_setting('supervisor.blocked_batch', true);
    IF blocked IS NOT NULL AND blocked <> '' THEN
        PERFORM set_config('supervisor.blocked_batch', '', true);
        PERFORM pg_advisory_xact_lock(1112818504, (blocked::bigint % 2147483647)::int);
        PERFORM supervisor.batch_drain(blocked::bigint, 1000, false);
    END IF;

    -- The hot path: claims, renewals and completions of plain jobs stop here after one
    -- scan of the statement's own rows.
    IF NOT EXISTS (SELECT 1 FROM new_rows n
                   WHERE (n.state IN ('completed', 'discarded', 'cancelled', 'expired')
                          AND (n.batch_id IS NOT NULL OR n.watched))
                      OR (n.state = 'retryable' AND n.batch_id IS NOT NULL)) THEN
        RETURN NULL;
    END IF;

    -- The failure budget (0025): only batches with one are counted, each under the
    -- batch's advisory lock taken before its row (the closing loop below takes them in
    -- the same order), in batch-id order.
    FOR r IN SELECT n.batch_id AS id,
                    count(*) FILTER (WHERE n.state IN ('retryable', 'discarded'))::integer
                        AS failed,
                    count(*) FILTER (WHERE n.state = 'completed')::integer AS ok
             FROM new_rows n JOIN old_rows o ON o.id = n.id
             WHERE n.batch_id IS NOT NULL AND o.state = 'running'
               AND n.state IN ('retryable', 'discarded', 'completed')
               AND EXISTS (SELECT 1 FROM supervisor.batches x WHERE x.id = n.batch_id
                             AND (x.max_failures IS NOT NULL
                                  OR x.max_failure_rate IS NOT NULL))
             GROUP BY n.batch_id ORDER BY n.batch_id LOOP
        PERFORM pg_advisory_xact_lock(1112818504, (r.id % 2147483647)::int);
        UPDATE supervisor.batches
        SET failures = failures + r.failed, successes = successes + r.ok
        WHERE id = r.id AND stopped_at IS NULL AND finished_at IS NULL
        RETURNING * INTO bt;
        CONTINUE WHEN NOT FOUND;  -- a success may bring the rate's minimum
        why := NULL;
        IF bt.max_failures IS NOT NULL AND bt.failures >= bt.max_failures THEN
            why := format('%s failed attempts reached max_failures=%s',
                          bt.failures, bt.max_failures);
        ELSIF bt.max_failure_rate IS NOT NULL AND bt.failures + bt.successes >= 20
              AND bt.failures >= bt.max_failure_rate * (bt.failures + bt.successes) THEN
            why := format('%s of %s finished attempts failed, past max_failure_rate=%s',
                          bt.failures, bt.failures + bt.successes, bt.max_failure_rate);
        END IF;
        IF why IS NOT NULL AND supervisor.batch_stop(r.id, 'aborted', why) THEN
            PERFORM supervisor.batch_drain(r.id, 1000, false);
        END IF;
    END LOOP;

    IF NOT EXISTS (SELECT 1 FROM new_rows n
                   WHERE n.state IN ('completed', 'discarded', 'cancelled', 'expired')
                     AND (n.batch_id IS NOT NULL OR n.watched)) THEN
        RETURN NULL;
    END IF;

    -- Batches: each batch touched takes its own lock (not a row: nothing is updated per
    -- member), then one index probe decides whether it was the last. Locks in id order,
    -- so two statements closing members of the same batches cannot deadlock. The probe
    -- is a new statement, so it sees every transaction that held the lock before us.
    FOR b IN SELECT DISTINCT n.batch_id FROM new_rows n JOIN old_rows o ON o.id = n.id
             WHERE n.batch_id IS NOT NULL
               AND n.state IN ('completed', 'discarded', 'cancelled', 'expired')
               AND o.state NOT IN ('completed', 'discarded', 'cancelled', 'expired')
             ORDER BY 1 LOOP
        PERFORM pg_advisory_xact_lock(1112818504, (b % 2147483647)::int);  -- 'BTCH'
        -- From the highest id down: members are claimed about in id order, so the last
        -- is open until the batch's end, and the probe reads one or two entries. From
        -- the lowest up it walked the entries of every member finished so far, which a
        -- held MVCC horizon keeps (issue 40: 52 index entries read per job in batches
        -- of 5,000 under a 150 s hold).
        -- A scalar subquery: EXISTS would drop the ORDER BY.
        CONTINUE WHEN (
            SELECT j.id FROM supervisor.jobs j WHERE j.batch_id = b
              AND j.state IN ('available', 'scheduled', 'running', 'retryable')
            ORDER BY j.id DESC LIMIT 1) IS NOT NULL;
        SELECT * INTO bt FROM supervisor.batches WHERE id = b AND finished_at IS NULL;
        CONTINUE WHEN NOT FOUND;
        cb := NULL;
        -- With an error callback (0028) the batch's outcome picks one of the two: a
        -- stopped batch, or one with a member not completed, calls on_failure; else
        -- `then`. Members are read through jobs_batch_idx once, at the close, and only
        -- for a batch that has an error callback.
        failed_ := bt.on_failure IS NOT NULL AND (bt.stop_kind IS NOT NULL OR EXISTS (
            SELECT 1 FROM supervisor.jobs j WHERE j.batch_id = b
              AND j.state IN ('discarded', 'cancelled', 'expired')));
        IF failed_ THEN
            INSERT INTO supervisor.jobs (kind, queue, args, priority, max_attempts, timeout)
            VALUES (bt.on_failure->>'kind', bt.on_failure->>'queue', bt.on_failure->'args',
                    (bt.on_failure->>'priority')::integer,
                    (bt.on_failure->>'max_attempts')::integer,
                    (bt.on_failure->>'timeout')::float8)
            RETURNING id INTO cb;
        ELSIF bt.callback_kind IS NOT NULL THEN
            INSERT INTO supervisor.jobs (kind, queue, args, priority, max_attempts, timeout)
            VALUES (bt.callback_kind, bt.callback_queue, bt.callback_args,
                    bt.callback_priority, bt.callback_max_attempts, bt.callback_timeout)
            RETURNING id INTO cb;
        END IF;
        UPDATE supervisor.batches
        SET finished_at = now(), callback_id = cb, called_on_failure = failed_
        WHERE id = b;
        PERFORM pg_notify('supervisor_final', 'b' || b);
    END LOOP;
    -- A held dependent that expired keeps its edges and counter until its dependencies
    -- end: each consumes its edge as usual, and release_dependent / cancel_dependent
    -- change only a job still 'scheduled'. Deleting them here would lock them after the
    -- job row, the reverse of the order below (counter, then job), and deadlock with a
    -- dependency finishing at the same moment.

    -- Watched rows: wake their waiters, then settle their dependents.
    SELECT array_agg(n.id ORDER BY n.id) INTO done
    FROM new_rows n JOIN old_rows o ON o.id = n.id
    WHERE n.watched AND n.state IN ('completed', 'discarded', 'cancelled', 'expired')
      AND o.state NOT IN ('completed', 'discarded', 'cancelled', 'expired');
    IF done IS NULL THEN
        RETURN NULL;
    END IF;
    PERFORM pg_notify('supervisor_final', 'j' || x) FROM unnest(done) AS x;

    -- Each edge from a job that just became final is consumed once (deleted), so every
    -- dependency is counted once whatever retries and rescues happen. Dependents in id
    -- order, each one's counter row locked before its job row: two statements finishing
    -- dependencies of the same jobs wait for each other instead of deadlocking, and the
    -- second decrements what the first left.
    FOR r IN
        WITH gone AS (
            DELETE FROM supervisor.job_dependencies e WHERE e.dependency_id = ANY(done)
            RETURNING e.dependency_id, e.dependent_id, e.allow_failure)
        SELECT g.dependent_id AS id,
               -- an edge that allows failure counts as done whatever its job's end
               count(*) FILTER (WHERE n.state = 'completed' OR g.allow_failure)::integer
                   AS completed,
               (array_agg(n.id ORDER BY n.id)
                    FILTER (WHERE n.state <> 'completed' AND NOT g.allow_failure))[1]
                   AS failed,
               (array_agg(n.state ORDER BY n.id)
                    FILTER (WHERE n.state <> 'completed' AND NOT g.allow_failure))[1]
                   AS failed_state
        FROM gone g JOIN new_rows n ON n.id = g.dependency_id
        GROUP BY g.dependent_id ORDER BY g.dependent_id
    LOOP
        IF r.failed IS NOT NULL THEN
            PERFORM supervisor.cancel_dependent(r.id, r.failed, 'ended ' || r.failed_state);
        ELSE
            UPDATE supervisor.dependents SET pending = pending - r.completed
            WHERE id = r.id RETURNING pending INTO left_;
            IF FOUND AND left_ = 0 THEN
                PERFORM supervisor.release_dependent(r.id);
            END IF;
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;

CREATE FUNCTION supervisor.jobs_batch_claim_guard() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM supervisor.batches
               WHERE id = NEW.batch_id AND finished_at IS NULL
                 AND (stopped_at IS NOT NULL OR paused_at IS NOT NULL)) THEN
        PERFORM set_config('supervisor.blocked_batch', NEW.batch_id::text, true);
        RETURN NULL;  -- not claimed: the claim returns fewer rows
    END IF;
    RETURN NEW;
END
$$;

CREATE FUNCTION supervisor.notify_available_job() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify('supervisor_jobs', NEW.queue);
    RETURN NULL;
END
$$;

CREATE FUNCTION supervisor.notify_inserted_jobs() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    q text;
    k record;
BEGIN
    -- Statement-level with a transition table: a 20k-row COPY costs one small loop over
    -- its distinct queues, not 20k function calls.
    -- Per queue its first claim-order key and its lowest batch (``b`` + id, ``b`` alone
    -- for none): a fair claim's walk of the batches moves back to it.
    FOR k IN SELECT DISTINCT ON (queue) queue, priority, run_at,
                    min(batch_id) OVER (PARTITION BY queue) AS batch_id FROM new_jobs
             WHERE state = 'available' ORDER BY queue, priority, run_at LOOP
        PERFORM pg_notify('supervisor_jobs', k.queue);
        PERFORM pg_notify('supervisor_job_keys', k.queue || chr(9) || k.priority || chr(9)
                                                 || extract(epoch FROM k.run_at) || chr(9)
                                                 || 'b' || coalesce(k.batch_id::text, ''));
    END LOOP;
    FOR q IN SELECT DISTINCT queue FROM new_jobs WHERE state = 'scheduled' LOOP
        PERFORM pg_notify('supervisor_scheduled', q);
    END LOOP;
    RETURN NULL;
END
$$;

CREATE FUNCTION supervisor.notify_job_key() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify('supervisor_job_keys', NEW.queue || chr(9) || NEW.priority || chr(9)
                                             || extract(epoch FROM NEW.run_at) || chr(9)
                                             || 'b' || coalesce(NEW.batch_id::text, ''));
    RETURN NULL;
END
$$;

CREATE FUNCTION supervisor.notify_paused_queue() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify('supervisor_paused', NEW.name);
    RETURN NULL;
END
$$;

CREATE FUNCTION supervisor.notify_resumed_queue() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify('supervisor_jobs', NEW.name);
    RETURN NULL;
END
$$;

CREATE FUNCTION supervisor.release_dependent(p_id bigint) RETURNS void
    LANGUAGE sql
    AS $$
    DELETE FROM supervisor.dependents WHERE id = p_id;
    UPDATE supervisor.jobs SET state = 'available', run_at = now()
    WHERE id = p_id AND state = 'scheduled';
$$;

CREATE FUNCTION supervisor.resources_fit(need jsonb, have jsonb) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $_$
    SELECT need IS NULL OR NOT EXISTS (
        SELECT 1 FROM jsonb_each_text(need) AS r(name, n)
        WHERE CASE WHEN r.n ~ '^[0-9]{1,9}$'
                   THEN r.n::integer > coalesce((have ->> r.name)::integer, 0)
                   ELSE true END)
$_$;

CREATE FUNCTION supervisor.settle_dependents() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    deps  bigint[];
    tries integer := 0;
    r     record;
BEGIN
    -- Each held job's row fires this at the commit; the first run settles every
    -- unsettled one of the transaction, so the others find their own row settled (or
    -- released) by a primary-key probe. Asking whether any row is unsettled read the
    -- partial index's dead entries the first run's updates left, once per row:
    -- quadratic, 208 s for 20,000 members held by one enqueue_many.
    IF NOT EXISTS (SELECT 1 FROM supervisor.dependents WHERE id = NEW.id AND NOT settled)
    THEN
        RETURN NULL;
    END IF;
    SELECT array_agg(DISTINCT e.dependency_id) INTO deps
    FROM supervisor.dependents d
    JOIN supervisor.job_dependencies e ON e.dependent_id = d.id
    WHERE NOT d.settled;
    LOOP
        BEGIN
            IF tries < 100 THEN
                PERFORM 1 FROM supervisor.jobs WHERE id = ANY(deps) ORDER BY id
                FOR NO KEY UPDATE NOWAIT;
            ELSE
                PERFORM 1 FROM supervisor.jobs WHERE id = ANY(deps) ORDER BY id
                FOR NO KEY UPDATE;
            END IF;
            EXIT;
        EXCEPTION WHEN lock_not_available THEN
            tries := tries + 1;
            PERFORM pg_sleep(least(0.001 * tries, 0.02));
        END;
    END LOOP;
    UPDATE supervisor.jobs SET watched = true WHERE id = ANY(deps) AND NOT watched;

    FOR r IN
        SELECT d.id,
               count(*) FILTER (WHERE x.state = 'completed' OR (e.allow_failure AND (
                   x.id IS NULL OR x.state IN ('discarded', 'cancelled', 'expired')))
               )::integer AS completed,
               (array_agg(e.dependency_id ORDER BY e.dependency_id)
                    FILTER (WHERE NOT e.allow_failure AND (x.id IS NULL
                            OR x.state IN ('discarded', 'cancelled', 'expired'))))[1]
                   AS failed,
               (array_agg(coalesce('ended ' || x.state, 'no longer exists')
                          ORDER BY e.dependency_id)
                    FILTER (WHERE NOT e.allow_failure AND (x.id IS NULL
                            OR x.state IN ('discarded', 'cancelled', 'expired'))))[1]
                   AS failed_how
        FROM supervisor.dependents d
        JOIN supervisor.job_dependencies e ON e.dependent_id = d.id
        LEFT JOIN supervisor.jobs x ON x.id = e.dependency_id
        WHERE NOT d.settled
        GROUP BY d.id ORDER BY d.id
    LOOP
        IF r.failed IS NOT NULL THEN
            PERFORM supervisor.cancel_dependent(r.id, r.failed, r.failed_how);
            CONTINUE;
        END IF;
        IF r.completed > 0 THEN
            DELETE FROM supervisor.job_dependencies e
            WHERE e.dependent_id = r.id AND NOT EXISTS (
                SELECT 1 FROM supervisor.jobs x WHERE x.id = e.dependency_id
                  AND (x.state <> 'completed' AND NOT (e.allow_failure
                       AND x.state IN ('discarded', 'cancelled', 'expired'))));
        END IF;
        UPDATE supervisor.dependents SET pending = pending - r.completed, settled = true
        WHERE id = r.id;
        IF NOT EXISTS (SELECT 1 FROM supervisor.job_dependencies WHERE dependent_id = r.id)
        THEN
            PERFORM supervisor.release_dependent(r.id);
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;

CREATE FUNCTION supervisor.short_name(name text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT CASE WHEN char_length(name) <= 255 THEN name
                ELSE left(name, 200) || '~' || md5(name) END
$$;

-- ---------------------------------------------------------------- jobs

-- Storage (issue 40, docs/operations.md "Storage settings of supervisor.jobs"): every
-- job writes three row versions (insert, claim, completion), none of the updates HOT
-- (they change `state`, which the partial indexes' predicates read). fillfactor 70
-- leaves room for the new version on its page: 7% less WAL per job drained, a 5%
-- smaller table. Autovacuum at 1% of the table (not 20%): the table keeps days of
-- finished jobs, so the defaults wait for hundreds of thousands of dead versions.
CREATE TABLE supervisor.jobs (
    id bigint NOT NULL,
    kind text NOT NULL,
    queue text DEFAULT 'default'::text NOT NULL,
    args jsonb DEFAULT '{}'::jsonb NOT NULL,
    state text DEFAULT 'available'::text NOT NULL,
    priority integer DEFAULT 0 NOT NULL,
    attempt integer DEFAULT 0 NOT NULL,
    max_attempts integer,
    run_at timestamp with time zone DEFAULT now() NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    attempted_at timestamp with time zone,
    finished_at timestamp with time zone,
    heartbeat_at timestamp with time zone,
    lease_owner text,
    lease_expires_at timestamp with time zone,
    timeout double precision,
    unique_key text,
    progress jsonb,
    errors jsonb DEFAULT '[]'::jsonb NOT NULL,
    result jsonb,
    batch_id bigint,
    depends_on bigint[],
    watched boolean DEFAULT false NOT NULL,
    concurrency_key text,
    trace_context jsonb,
    usage jsonb,
    checkpoint jsonb,
    checkpoint_at timestamp with time zone,
    expires_at timestamp with time zone,
    cpus integer,
    memory bigint,
    output text,
    resources jsonb,
    dependency_names jsonb,
    CONSTRAINT jobs_args_check CHECK ((jsonb_typeof(args) = 'object'::text)),
    CONSTRAINT jobs_concurrency_key_check CHECK (((concurrency_key IS NULL) OR (concurrency_key <> ''::text))),
    CONSTRAINT jobs_cpus_check CHECK (((cpus >= 1) AND (cpus <= 1024))),
    CONSTRAINT jobs_dependency_names_check CHECK (((dependency_names IS NULL) OR (jsonb_typeof(dependency_names) = 'object'::text))),
    CONSTRAINT jobs_errors_check CHECK ((jsonb_typeof(errors) = 'array'::text)),
    CONSTRAINT jobs_kind_check CHECK ((kind <> ''::text)),
    CONSTRAINT jobs_max_attempts_check CHECK ((max_attempts >= 1)),
    CONSTRAINT jobs_memory_check CHECK (((memory >= 1) AND (memory <= '1099511627776'::bigint))),
    CONSTRAINT jobs_queue_check CHECK (((char_length(queue) >= 1) AND (char_length(queue) <= 255))),
    CONSTRAINT jobs_resources_check CHECK (((resources IS NULL) OR (jsonb_typeof(resources) = 'object'::text))),
    CONSTRAINT jobs_timeout_check CHECK (((timeout IS NULL) OR (timeout > (0)::double precision)))
)
WITH (fillfactor='70', autovacuum_vacuum_scale_factor='0.01', autovacuum_vacuum_threshold='1000', autovacuum_vacuum_insert_scale_factor='0.01', autovacuum_analyze_scale_factor='0.01');

ALTER TABLE supervisor.jobs ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (
    SEQUENCE NAME supervisor.jobs_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

COMMENT ON TABLE supervisor.jobs IS 'One row per job. Producers may INSERT (kind, queue, args) with plain SQL.';

ALTER TABLE ONLY supervisor.jobs
    ADD CONSTRAINT jobs_pkey PRIMARY KEY (id);

ALTER TABLE supervisor.jobs
    ADD CONSTRAINT jobs_concurrency_key_length CHECK ((char_length(concurrency_key) <= 255)) NOT VALID;

ALTER TABLE supervisor.jobs
    ADD CONSTRAINT jobs_kind_length CHECK ((char_length(kind) <= 255)) NOT VALID;

ALTER TABLE supervisor.jobs
    ADD CONSTRAINT jobs_state_check CHECK ((state = ANY (ARRAY['available'::text, 'scheduled'::text, 'running'::text, 'completed'::text, 'retryable'::text, 'discarded'::text, 'cancelled'::text, 'expired'::text]))) NOT VALID;

ALTER TABLE supervisor.jobs
    ADD CONSTRAINT jobs_timeout_finite CHECK (((timeout IS NULL) OR ((timeout > (0)::double precision) AND (timeout < 'Infinity'::double precision)))) NOT VALID;

ALTER TABLE supervisor.jobs
    ADD CONSTRAINT jobs_trace_context_carrier CHECK (((trace_context IS NULL) OR ((jsonb_typeof(trace_context) = 'object'::text) AND (octet_length((trace_context)::text) <= 4096)))) NOT VALID;

ALTER TABLE supervisor.jobs
    ADD CONSTRAINT jobs_unique_key_length CHECK ((char_length(unique_key) <= 512)) NOT VALID;

CREATE INDEX jobs_available_idx ON supervisor.jobs USING btree (queue, priority, run_at, id) WHERE (state = 'available'::text);

COMMENT ON INDEX supervisor.jobs_available_idx IS 'Claim path: ordered scan of waiting jobs per queue; partial to stay small.';

CREATE INDEX jobs_batch_idx ON supervisor.jobs USING btree (batch_id, id) WHERE (batch_id IS NOT NULL);

CREATE INDEX jobs_batch_open_idx ON supervisor.jobs USING btree (batch_id, id) WHERE ((batch_id IS NOT NULL) AND (state = ANY (ARRAY['available'::text, 'scheduled'::text, 'running'::text, 'retryable'::text])));

CREATE INDEX jobs_created_brin ON supervisor.jobs USING brin (created_at);

COMMENT ON INDEX supervisor.jobs_created_brin IS 'dashboard: jobs created in a time range.';

CREATE INDEX jobs_due_idx ON supervisor.jobs USING btree (run_at) WHERE (state = ANY (ARRAY['scheduled'::text, 'retryable'::text]));

COMMENT ON INDEX supervisor.jobs_due_idx IS 'promote_due: scheduled/retryable rows by run_at.';

CREATE INDEX jobs_error_words_idx ON supervisor.jobs USING gin (to_tsvector('simple'::regconfig, jsonb_path_query_array(errors, '$[*]."message"'::jsonpath))) WHERE (errors <> '[]'::jsonb);

COMMENT ON INDEX supervisor.jobs_error_words_idx IS 'dashboard: words of the error messages (text search).';

CREATE INDEX jobs_expiry_idx ON supervisor.jobs USING btree (expires_at) WHERE ((expires_at IS NOT NULL) AND (state = ANY (ARRAY['available'::text, 'scheduled'::text, 'retryable'::text])));

COMMENT ON INDEX supervisor.jobs_expiry_idx IS 'expire: waiting jobs with an expiry, by expires_at.';

CREATE INDEX jobs_fair_idx ON supervisor.jobs USING btree (queue, batch_id, priority, run_at, id) WHERE (((state || ''::text) = 'available'::text) AND (batch_id IS NOT NULL));

CREATE INDEX jobs_finished_idx ON supervisor.jobs USING btree (finished_at) WHERE (state = ANY (ARRAY['completed'::text, 'discarded'::text, 'cancelled'::text, 'expired'::text]));

COMMENT ON INDEX supervisor.jobs_finished_idx IS 'prune: finished rows by finished_at; status: recent completions.';

CREATE INDEX jobs_lease_idx ON supervisor.jobs USING btree (lease_expires_at) WHERE (state = 'running'::text);

COMMENT ON INDEX supervisor.jobs_lease_idx IS 'rescue_expired: running rows by lease expiry.';

CREATE INDEX jobs_running_key_idx ON supervisor.jobs USING btree (queue, concurrency_key) WHERE ((state = 'running'::text) AND (concurrency_key IS NOT NULL));

COMMENT ON INDEX supervisor.jobs_running_key_idx IS 'Per-key limits: running jobs per (queue, concurrency_key).';

CREATE UNIQUE INDEX jobs_unique_key_idx ON supervisor.jobs USING btree (unique_key) WHERE ((unique_key IS NOT NULL) AND (state = ANY (ARRAY['available'::text, 'scheduled'::text, 'running'::text, 'retryable'::text])));

COMMENT ON INDEX supervisor.jobs_unique_key_idx IS 'unique_key: one live job per key; finished jobs free the key.';

CREATE TRIGGER jobs_after_update AFTER UPDATE ON supervisor.jobs REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION supervisor.jobs_after_update();

CREATE TRIGGER jobs_batch_claim_guard BEFORE UPDATE OF state ON supervisor.jobs FOR EACH ROW WHEN (((new.batch_id IS NOT NULL) AND (new.state = 'running'::text) AND (old.state <> 'running'::text))) EXECUTE FUNCTION supervisor.jobs_batch_claim_guard();

CREATE TRIGGER jobs_notify_available AFTER UPDATE OF state ON supervisor.jobs FOR EACH ROW WHEN (((new.state = 'available'::text) AND (old.state IS DISTINCT FROM 'available'::text))) EXECUTE FUNCTION supervisor.notify_available_job();

CREATE TRIGGER jobs_notify_insert AFTER INSERT ON supervisor.jobs REFERENCING NEW TABLE AS new_jobs FOR EACH STATEMENT EXECUTE FUNCTION supervisor.notify_inserted_jobs();

CREATE TRIGGER jobs_notify_key AFTER UPDATE OF state, priority, run_at ON supervisor.jobs FOR EACH ROW WHEN (((new.state = 'available'::text) AND ((old.state IS DISTINCT FROM 'available'::text) OR (new.priority < old.priority) OR (new.run_at < old.run_at)))) EXECUTE FUNCTION supervisor.notify_job_key();

CREATE TRIGGER jobs_notify_key_freed AFTER UPDATE OF state ON supervisor.jobs FOR EACH ROW WHEN (((old.state = 'running'::text) AND (new.state <> 'running'::text) AND (new.concurrency_key IS NOT NULL))) EXECUTE FUNCTION supervisor.notify_available_job();

-- ---------------------------------------------------------------- batches

CREATE TABLE supervisor.batches (
    id bigint NOT NULL,
    total integer NOT NULL,
    callback_kind text,
    callback_queue text,
    callback_args jsonb,
    callback_priority integer DEFAULT 0 NOT NULL,
    callback_max_attempts integer,
    callback_timeout double precision,
    callback_id bigint,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone,
    max_failures integer,
    max_failure_rate double precision,
    failures integer DEFAULT 0 NOT NULL,
    successes integer DEFAULT 0 NOT NULL,
    stopped_at timestamp with time zone,
    stop_kind text,
    stop_reason text,
    paused_at timestamp with time zone,
    on_failure jsonb,
    called_on_failure boolean DEFAULT false NOT NULL,
    CONSTRAINT batches_callback_args_check CHECK ((jsonb_typeof(callback_args) = 'object'::text)),
    CONSTRAINT batches_callback_kind_check CHECK ((callback_kind <> ''::text)),
    CONSTRAINT batches_callback_max_attempts_check CHECK ((callback_max_attempts >= 1)),
    CONSTRAINT batches_callback_queue_check CHECK (((char_length(callback_queue) >= 1) AND (char_length(callback_queue) <= 255))),
    CONSTRAINT batches_callback_timeout_check CHECK ((callback_timeout > (0)::double precision)),
    CONSTRAINT batches_check CHECK (((callback_id IS NULL) OR (finished_at IS NOT NULL))),
    CONSTRAINT batches_check1 CHECK (((callback_kind IS NULL) = (callback_queue IS NULL))),
    CONSTRAINT batches_max_failure_rate_check CHECK (((max_failure_rate > (0)::double precision) AND (max_failure_rate <= (1)::double precision))),
    CONSTRAINT batches_max_failures_check CHECK ((max_failures >= 1)),
    CONSTRAINT batches_on_failure_check CHECK (((on_failure IS NULL) OR ((jsonb_typeof(on_failure) = 'object'::text) AND (on_failure ? 'kind'::text) AND (on_failure ? 'queue'::text)))),
    CONSTRAINT batches_stop_kind_check CHECK ((stop_kind = ANY (ARRAY['cancelled'::text, 'aborted'::text]))),
    CONSTRAINT batches_stop_reason_check CHECK ((char_length(stop_reason) <= 1000)),
    CONSTRAINT batches_total_check CHECK ((total >= 1))
);

ALTER TABLE supervisor.batches ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (
    SEQUENCE NAME supervisor.batches_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

COMMENT ON TABLE supervisor.batches IS 'One row per batch. Members are jobs with batch_id = id; the counts are read from them.';

COMMENT ON COLUMN supervisor.batches.failures IS 'Failed attempts of members (running -> retryable or discarded); counted only when the batch has a budget.';

COMMENT ON COLUMN supervisor.batches.on_failure IS 'The error callback (kind, queue, args, priority, max_attempts, timeout): enqueued instead of the callback when a member did not complete or the batch was stopped.';

ALTER TABLE ONLY supervisor.batches
    ADD CONSTRAINT batches_callback_id_key UNIQUE (callback_id);

ALTER TABLE ONLY supervisor.batches
    ADD CONSTRAINT batches_pkey PRIMARY KEY (id);

ALTER TABLE supervisor.batches
    ADD CONSTRAINT batches_callback_kind_length CHECK ((char_length(callback_kind) <= 255)) NOT VALID;

CREATE INDEX batches_finished_idx ON supervisor.batches USING btree (finished_at) WHERE (finished_at IS NOT NULL);

-- ---------------------------------------------------------------- dependents

CREATE TABLE supervisor.dependents (
    id bigint NOT NULL,
    pending integer NOT NULL,
    settled boolean DEFAULT false NOT NULL,
    CONSTRAINT dependents_pending_check CHECK ((pending >= 0))
)
WITH (fillfactor='70');

COMMENT ON TABLE supervisor.dependents IS 'Held jobs (depends_on) and how many dependencies each still waits for.';

ALTER TABLE ONLY supervisor.dependents
    ADD CONSTRAINT dependents_pkey PRIMARY KEY (id);

CREATE INDEX dependents_unsettled_idx ON supervisor.dependents USING btree (id) WHERE (NOT settled);

CREATE CONSTRAINT TRIGGER dependents_settle AFTER INSERT ON supervisor.dependents DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION supervisor.settle_dependents();

-- ---------------------------------------------------------------- job_dependencies

CREATE TABLE supervisor.job_dependencies (
    dependency_id bigint NOT NULL,
    dependent_id bigint NOT NULL,
    allow_failure boolean DEFAULT false NOT NULL
);

COMMENT ON TABLE supervisor.job_dependencies IS 'Dependencies a held job still waits for; consumed when the dependency becomes final.';

ALTER TABLE ONLY supervisor.job_dependencies
    ADD CONSTRAINT job_dependencies_pkey PRIMARY KEY (dependency_id, dependent_id);

CREATE INDEX job_dependencies_dependent_idx ON supervisor.job_dependencies USING btree (dependent_id);

-- ---------------------------------------------------------------- queues

CREATE TABLE supervisor.queues (
    name text NOT NULL,
    paused boolean DEFAULT false NOT NULL,
    settings jsonb DEFAULT '{}'::jsonb NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    stop_running boolean DEFAULT false NOT NULL,
    CONSTRAINT queues_settings_check CHECK ((jsonb_typeof(settings) = 'object'::text))
);

COMMENT ON TABLE supervisor.queues IS 'Per-queue switches. A queue without a row is active with default settings.';

COMMENT ON COLUMN supervisor.queues.stop_running IS 'Paused with --stop-running: its running jobs are told to stop and go back unspent.';

ALTER TABLE ONLY supervisor.queues
    ADD CONSTRAINT queues_pkey PRIMARY KEY (name);

CREATE TRIGGER queues_notify_pause_insert AFTER INSERT ON supervisor.queues FOR EACH ROW WHEN (new.paused) EXECUTE FUNCTION supervisor.notify_paused_queue();

CREATE TRIGGER queues_notify_pause_update AFTER UPDATE OF paused ON supervisor.queues FOR EACH ROW WHEN ((new.paused AND (NOT old.paused))) EXECUTE FUNCTION supervisor.notify_paused_queue();

CREATE TRIGGER queues_notify_resume AFTER UPDATE OF paused ON supervisor.queues FOR EACH ROW WHEN ((old.paused AND (NOT new.paused))) EXECUTE FUNCTION supervisor.notify_resumed_queue();

CREATE TRIGGER queues_notify_stop_running AFTER UPDATE OF stop_running ON supervisor.queues FOR EACH ROW WHEN ((new.paused AND new.stop_running AND (NOT old.stop_running))) EXECUTE FUNCTION supervisor.notify_paused_queue();

-- ---------------------------------------------------------------- queue_limits

CREATE TABLE supervisor.queue_limits (
    queue text NOT NULL,
    max_running integer,
    max_rate double precision,
    burst integer,
    per_key_max_running integer,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT queue_limits_burst_check CHECK ((burst >= 1)),
    CONSTRAINT queue_limits_check CHECK (((burst IS NULL) OR (max_rate IS NOT NULL))),
    CONSTRAINT queue_limits_max_rate_check CHECK (((max_rate > (0)::double precision) AND (max_rate < 'Infinity'::double precision))),
    CONSTRAINT queue_limits_max_running_check CHECK ((max_running >= 0)),
    CONSTRAINT queue_limits_per_key_max_running_check CHECK ((per_key_max_running >= 1)),
    CONSTRAINT queue_limits_queue_check CHECK (((char_length(queue) >= 1) AND (char_length(queue) <= 255)))
);

COMMENT ON TABLE supervisor.queue_limits IS 'Limits that hold across every supervisor (supervisor queues limit). No row: none.';

ALTER TABLE ONLY supervisor.queue_limits
    ADD CONSTRAINT queue_limits_pkey PRIMARY KEY (queue);

-- ---------------------------------------------------------------- limit_leases

CREATE TABLE supervisor.limit_leases (
    queue text NOT NULL,
    owner text NOT NULL,
    slots integer DEFAULT 0 NOT NULL,
    want_slots integer DEFAULT 0 NOT NULL,
    rate double precision DEFAULT 0 NOT NULL,
    want_rate double precision DEFAULT 0 NOT NULL,
    expires_at timestamp with time zone NOT NULL
)
WITH (fillfactor='50');

COMMENT ON TABLE supervisor.limit_leases IS 'Each supervisor''s slice of a limited queue; free again once expires_at passes.';

ALTER TABLE ONLY supervisor.limit_leases
    ADD CONSTRAINT limit_leases_pkey PRIMARY KEY (queue, owner);

-- ---------------------------------------------------------------- schedules

CREATE TABLE supervisor.schedules (
    name text NOT NULL,
    kind text NOT NULL,
    queue text NOT NULL,
    args jsonb DEFAULT '{}'::jsonb NOT NULL,
    priority integer DEFAULT 0 NOT NULL,
    cron text,
    every integer,
    timezone text DEFAULT 'UTC'::text NOT NULL,
    catch_up boolean DEFAULT false NOT NULL,
    overlap boolean DEFAULT true NOT NULL,
    source text DEFAULT 'code'::text NOT NULL,
    paused boolean DEFAULT false NOT NULL,
    done_until timestamp with time zone DEFAULT now() NOT NULL,
    last_slot timestamp with time zone,
    last_job_id bigint,
    last_fired_at timestamp with time zone,
    seen_at timestamp with time zone DEFAULT now() NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT schedules_args_check CHECK ((jsonb_typeof(args) = 'object'::text)),
    CONSTRAINT schedules_check CHECK (((cron IS NULL) <> (every IS NULL))),
    CONSTRAINT schedules_every_check CHECK (((every IS NULL) OR (every >= 1))),
    CONSTRAINT schedules_kind_check CHECK ((kind <> ''::text)),
    CONSTRAINT schedules_name_check CHECK (((char_length(name) >= 1) AND (char_length(name) <= 200))),
    CONSTRAINT schedules_queue_check CHECK (((char_length(queue) >= 1) AND (char_length(queue) <= 255))),
    CONSTRAINT schedules_source_check CHECK ((source = ANY (ARRAY['code'::text, 'config'::text])))
);

COMMENT ON TABLE supervisor.schedules IS 'Periodic jobs: definition as last declared by a supervisor, pause switch, firing mark.';

ALTER TABLE ONLY supervisor.schedules
    ADD CONSTRAINT schedules_pkey PRIMARY KEY (name);

ALTER TABLE supervisor.schedules
    ADD CONSTRAINT schedules_kind_length CHECK ((char_length(kind) <= 255)) NOT VALID;

-- ---------------------------------------------------------------- schedule_fires

CREATE TABLE supervisor.schedule_fires (
    schedule text NOT NULL,
    slot timestamp with time zone NOT NULL,
    job_id bigint,
    outcome text NOT NULL,
    coalesced integer DEFAULT 1 NOT NULL,
    fired_at timestamp with time zone DEFAULT now() NOT NULL,
    fired_by text,
    CONSTRAINT schedule_fires_coalesced_check CHECK ((coalesced >= 1)),
    CONSTRAINT schedule_fires_outcome_check CHECK ((outcome = ANY (ARRAY['fired'::text, 'skipped'::text, 'manual'::text])))
);

COMMENT ON TABLE supervisor.schedule_fires IS 'One row per slot fired (or skipped) per schedule; the key makes a slot fire once.';

ALTER TABLE ONLY supervisor.schedule_fires
    ADD CONSTRAINT schedule_fires_pkey PRIMARY KEY (schedule, slot);

-- ---------------------------------------------------------------- supervisors

CREATE TABLE supervisor.supervisors (
    id text NOT NULL,
    host text NOT NULL,
    pid integer NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    heartbeat_at timestamp with time zone DEFAULT now() NOT NULL,
    queues text[] DEFAULT '{}'::text[] NOT NULL,
    children integer DEFAULT 0 NOT NULL,
    busy integer DEFAULT 0 NOT NULL,
    info jsonb DEFAULT '{}'::jsonb NOT NULL
);

COMMENT ON TABLE supervisor.supervisors IS 'Running supervisors and their last heartbeat, for status and lease rescue.';

ALTER TABLE ONLY supervisor.supervisors
    ADD CONSTRAINT supervisors_pkey PRIMARY KEY (id);

-- ---------------------------------------------------------------- kind_pauses

CREATE TABLE supervisor.kind_pauses (
    kind text NOT NULL,
    paused_until timestamp with time zone,
    reason text NOT NULL,
    paused_at timestamp with time zone DEFAULT now() NOT NULL,
    crashes integer DEFAULT 0 NOT NULL
);

ALTER TABLE ONLY supervisor.kind_pauses
    ADD CONSTRAINT kind_pauses_pkey PRIMARY KEY (kind);

-- ---------------------------------------------------------------- kind_crashes

CREATE TABLE supervisor.kind_crashes (
    kind text NOT NULL,
    at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE INDEX kind_crashes_kind_at ON supervisor.kind_crashes USING btree (kind, at);

-- ---------------------------------------------------------------- kind_memory

CREATE TABLE supervisor.kind_memory (
    kind text NOT NULL,
    peak_bytes bigint NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT kind_memory_kind_check CHECK ((char_length(kind) <= 255)),
    CONSTRAINT kind_memory_peak_bytes_check CHECK ((peak_bytes > 0))
);

ALTER TABLE ONLY supervisor.kind_memory
    ADD CONSTRAINT kind_memory_pkey PRIMARY KEY (kind);

-- ---------------------------------------------------------------- job_minutes

CREATE TABLE supervisor.job_minutes (
    minute timestamp with time zone NOT NULL,
    queue text NOT NULL,
    kind text NOT NULL,
    completed integer DEFAULT 0 NOT NULL,
    discarded integer DEFAULT 0 NOT NULL,
    cancelled integer DEFAULT 0 NOT NULL,
    retried integer DEFAULT 0 NOT NULL,
    wait_sum double precision DEFAULT 0 NOT NULL,
    wait_n integer DEFAULT 0 NOT NULL,
    wait_p95 double precision,
    run_sum double precision DEFAULT 0 NOT NULL,
    run_n integer DEFAULT 0 NOT NULL,
    run_p95 double precision,
    cpu_seconds double precision,
    max_rss_bytes bigint
);

COMMENT ON TABLE supervisor.job_minutes IS 'Per minute, queue and kind: jobs finished, retries, wait and run time (30 days).';

COMMENT ON COLUMN supervisor.job_minutes.cpu_seconds IS 'Sum of the usage cpu_seconds of the jobs finished this minute (NULL: none had a usage).';

COMMENT ON COLUMN supervisor.job_minutes.max_rss_bytes IS 'Largest usage max_rss_bytes of the jobs finished this minute (NULL: none had a usage).';

ALTER TABLE ONLY supervisor.job_minutes
    ADD CONSTRAINT job_minutes_pkey PRIMARY KEY (minute, queue, kind);

-- ---------------------------------------------------------------- queue_minutes

CREATE TABLE supervisor.queue_minutes (
    minute timestamp with time zone NOT NULL,
    queue text NOT NULL,
    available integer DEFAULT 0 NOT NULL,
    running integer DEFAULT 0 NOT NULL,
    oldest_wait double precision
);

COMMENT ON TABLE supervisor.queue_minutes IS 'Per minute and queue: available and running jobs, oldest wait (30 days).';

ALTER TABLE ONLY supervisor.queue_minutes
    ADD CONSTRAINT queue_minutes_pkey PRIMARY KEY (minute, queue);

-- ---------------------------------------------------------------- rollup_mark

CREATE TABLE supervisor.rollup_mark (
    one boolean DEFAULT true NOT NULL,
    rolled_until timestamp with time zone NOT NULL,
    CONSTRAINT rollup_mark_one_check CHECK (one)
);

ALTER TABLE ONLY supervisor.rollup_mark
    ADD CONSTRAINT rollup_mark_pkey PRIMARY KEY (one);

-- every minute before this one is in job_minutes
INSERT INTO supervisor.rollup_mark (rolled_until) VALUES (date_trunc('minute', now()));

-- ---------------------------------------------------------------- references

ALTER TABLE ONLY supervisor.schedule_fires
    ADD CONSTRAINT schedule_fires_schedule_fkey FOREIGN KEY (schedule) REFERENCES supervisor.schedules(name) ON DELETE CASCADE;

-- Back on for the files after this one, which `migrate` may apply in the same transaction.
SET LOCAL check_function_bodies = DEFAULT;
