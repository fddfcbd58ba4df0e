-- Finished jobs out of the hot path (issue 40).
--
-- Completed, cancelled, discarded and expired jobs stayed in supervisor.jobs for their
-- retention (a week, a month) and went by a DELETE a row at a time: one more dead row
-- version per job, and the table a queue churns through held months of history. Now the
-- maintenance leader moves them, soon after they end, into archive tables that inherit
-- from supervisor.jobs (plain inheritance, not declarative partitions: a partitioned
-- table's key must include the partition key, a row moved between partitions by an
-- UPDATE makes every concurrent writer of it fail with a serialization error, and a new
-- partition beside a default one scans it under an exclusive lock). An archive is
-- retired whole by DROP TABLE once its newest row is past the retention.
--
-- What stays as it was: producers INSERT into supervisor.jobs (rows land in the parent,
-- the hot table); a reader that selects from supervisor.jobs by id, batch, state or
-- time sees the archives' rows too, with the same columns. The supervisor's own
-- statements on live jobs say FROM ONLY supervisor.jobs: they neither read nor lock the
-- archives.
--
-- Two families, by retention: 'done' (completed, cancelled) and 'failed' (discarded,
-- expired). Each has one open archive that takes the moved rows; it is closed and a new
-- one opened when it is older than the span the caller gives (an eighth of the
-- family's retention), so a family keeps about nine archives. A closed archive is
-- dropped once it was closed longer ago than the retention: every row in it ended
-- before it was closed.

CREATE TABLE supervisor.job_archives (
    name      text PRIMARY KEY,  -- a table in schema supervisor that inherits from jobs
    family    text NOT NULL CHECK (family IN ('done', 'failed')),
    opened_at timestamptz NOT NULL DEFAULT now(),
    closed_at timestamptz,  -- NULL: the family's open archive, which takes moved rows
    -- Where the next move's scan of jobs_finished_idx starts: under a held MVCC horizon
    -- that index keeps an entry for every row moved since the hold began, and a scan
    -- from its head would walk them all. Rows finished below it (a statement that ran
    -- longer than the margin) are moved by the next archive's first scan, from the head.
    scan_from timestamptz NOT NULL DEFAULT '-infinity'
);
CREATE UNIQUE INDEX job_archives_open_idx ON supervisor.job_archives (family)
    WHERE closed_at IS NULL;

CREATE FUNCTION supervisor.archive_states(p_family text) RETURNS text[]
    LANGUAGE sql IMMUTABLE
    AS $$
SELECT CASE p_family WHEN 'done' THEN ARRAY['completed', 'cancelled']
                     ELSE ARRAY['discarded', 'expired'] END
$$;

-- The archive the family's rows move into now (NULL: none yet), creating its successor
-- when there is none or it is older than p_span seconds. A new archive takes rows only
-- p_settle seconds after it was created, in a later transaction: a reader whose plan
-- was made before the archive existed (the extended protocol plans at Bind and takes
-- its snapshot at Execute) would otherwise find a row moved into it in neither table
-- (found by CI: a job read right after a burst came back empty). Until then the
-- archive before it takes the rows, and it is closed at the moment the successor takes
-- over, so every row in an archive ended before its closed_at. Creating the table takes
-- SHARE UPDATE EXCLUSIVE on supervisor.jobs (which only autovacuum, ANALYZE and DDL
-- conflict with), under a short lock_timeout, so a vacuum of the hot table is never
-- cancelled for it: on a timeout the successor comes a round later.
CREATE FUNCTION supervisor.open_job_archive(p_family text, p_span double precision,
                                            p_settle double precision)
    RETURNS text
    LANGUAGE plpgsql
    AS $$
DECLARE
    current supervisor.job_archives%ROWTYPE;
    newest text;
    fresh text;
    waited text := current_setting('lock_timeout');
BEGIN
    SELECT * INTO current FROM supervisor.job_archives
    WHERE family = p_family AND opened_at <= now() - make_interval(secs => p_settle)
    ORDER BY opened_at DESC LIMIT 1 FOR UPDATE;
    SELECT name INTO newest FROM supervisor.job_archives
    WHERE family = p_family ORDER BY opened_at DESC LIMIT 1;
    IF newest IS NOT NULL AND newest IS DISTINCT FROM current.name THEN
        RETURN current.name;  -- a successor settles: the archive before it goes on
    END IF;
    IF current.name IS NOT NULL
       AND current.opened_at > now() - make_interval(secs => p_span) THEN
        RETURN current.name;
    END IF;
    fresh := format('jobs_%s_%s', p_family,
                    to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYYMMDD"t"HH24MISSUS'));
    BEGIN
        PERFORM set_config('lock_timeout', '100ms', true);
        EXECUTE format('CREATE TABLE supervisor.%I (CHECK (state = ANY (%L::text[]))) '
                       'INHERITS (supervisor.jobs)', fresh, supervisor.archive_states(p_family));
        PERFORM set_config('lock_timeout', waited, true);
    EXCEPTION WHEN lock_not_available THEN
        PERFORM set_config('lock_timeout', waited, true);
        RETURN current.name;
    END;
    -- What readers of finished jobs look them up by: id (show, wait, dependencies),
    -- batch (a batch's results), finished_at (the history's roll-up), created_at, and
    -- the error search. The hot table's other indexes are on live states only.
    EXECUTE format('CREATE UNIQUE INDEX ON supervisor.%I (id)', fresh);
    EXECUTE format('CREATE INDEX ON supervisor.%I (batch_id, id) WHERE batch_id IS NOT NULL',
                   fresh);
    EXECUTE format('CREATE INDEX ON supervisor.%I (finished_at)', fresh);
    EXECUTE format('CREATE INDEX ON supervisor.%I USING brin (created_at)', fresh);
    EXECUTE format('CREATE INDEX ON supervisor.%I USING gin (to_tsvector(''simple''::regconfig, '
                   'jsonb_path_query_array(errors, ''$[*]."message"''::jsonpath))) '
                   'WHERE errors <> ''[]''::jsonb', fresh);
    IF current.name IS NOT NULL THEN
        UPDATE supervisor.job_archives
        SET closed_at = coalesce(closed_at, now() + make_interval(secs => p_settle))
        WHERE name = current.name;
    END IF;
    -- A new archive's first move scans from the index's head (scan_from's default).
    INSERT INTO supervisor.job_archives (name, family) VALUES (fresh, p_family);
    IF p_settle <= 0 THEN
        RETURN fresh;  -- no settling asked for (tests): the new archive at once
    END IF;
    RETURN current.name;
END
$$;

-- Move up to p_max finished jobs of each family from the hot table into the family's
-- open archive, whose span is p_done_span or p_failed_span seconds (NULL: that family
-- is not archived; its jobs stay in the hot table until the retention's prune). One
-- statement each (DELETE ... RETURNING into INSERT), so a job is in one table or the
-- other, never both or neither, whatever stops the mover. A row another transaction
-- has locked (a retry, an operator's update) is left for the next round. Returns each
-- family's count moved and its archive.
CREATE FUNCTION supervisor.archive_finished(p_done_span double precision,
                                            p_failed_span double precision, p_max integer,
                                            p_settle double precision)
    RETURNS TABLE (family text, moved integer, archive text)
    LANGUAGE plpgsql
    AS $$
DECLARE
    fam text;
    span double precision;
    target text;
    floor_at timestamptz;
    n integer;
BEGIN
    FOREACH fam IN ARRAY ARRAY['done', 'failed'] LOOP
        span := CASE fam WHEN 'done' THEN p_done_span ELSE p_failed_span END;
        target := CASE WHEN span IS NULL THEN NULL
                       ELSE supervisor.open_job_archive(fam, span, p_settle) END;
        n := 0;
        IF target IS NOT NULL THEN
            SELECT a.scan_from INTO floor_at FROM supervisor.job_archives a
            WHERE a.name = target;
            EXECUTE format($q$
                WITH picked AS (
                    SELECT j.id FROM ONLY supervisor.jobs j
                    WHERE j.state = ANY ($1) AND j.finished_at >= $2
                    LIMIT $3
                    FOR UPDATE SKIP LOCKED),
                gone AS (
                    DELETE FROM ONLY supervisor.jobs j USING picked p
                    WHERE j.id = p.id
                    RETURNING j.*)
                INSERT INTO supervisor.%I SELECT * FROM gone$q$, target)
            USING supervisor.archive_states(fam), floor_at, p_max;
            GET DIAGNOSTICS n = ROW_COUNT;
            IF n < p_max THEN
                -- Saw every row at or above the floor: the next scan starts near now,
                -- with a margin for a statement that stamped finished_at before this
                -- one began and committed after it. Each second of margin is a second
                -- of moved rows' dead entries read again by every round under a held
                -- horizon (60 s: 13 entries per job at 1,000 jobs/s). A row stamped
                -- below it waits for the next archive's first move, which starts from
                -- the index's head.
                UPDATE supervisor.job_archives SET scan_from = now() - interval '5 seconds'
                WHERE name = target;
            END IF;
        END IF;
        family := fam;
        moved := n;
        archive := target;
        RETURN NEXT;
    END LOOP;
END
$$;

-- Drop the closed archives whose closing is older than their family's retention
-- (seconds). Never waits behind a reader: an archive some other session has held a lock
-- on for over a second or from an idle transaction (a REPEATABLE READ snapshot that has
-- read supervisor.jobs holds one until it ends) is left for a later round, and the DROP
-- itself runs under a 50 ms lock_timeout for the shorter ones. Returns how many were dropped and how many
-- were due but left.
CREATE FUNCTION supervisor.retire_job_archives(p_done_retention double precision,
                                               p_failed_retention double precision,
                                               OUT dropped integer, OUT left_busy integer)
    LANGUAGE plpgsql
    AS $$
DECLARE
    arch supervisor.job_archives%ROWTYPE;
    waited text := current_setting('lock_timeout');
BEGIN
    dropped := 0;
    left_busy := 0;
    FOR arch IN
        SELECT * FROM supervisor.job_archives a
        WHERE a.closed_at IS NOT NULL
          AND a.closed_at < now() - make_interval(secs => CASE a.family
                  WHEN 'done' THEN p_done_retention ELSE p_failed_retention END)
        ORDER BY a.closed_at
    LOOP
        -- Only a lock held long, or by a session idle in its transaction, is a reason
        -- to skip: a statement that reads supervisor.jobs without ONLY (a keyed claim,
        -- the batch trigger, a dashboard read) locks every archive for its length, and
        -- with such statements back to back some lock is always there; the DROP waits
        -- for those under its lock_timeout.
        IF EXISTS (SELECT 1 FROM pg_locks l LEFT JOIN pg_stat_activity s ON s.pid = l.pid
                   WHERE l.locktype = 'relation'
                     AND l.relation = to_regclass(format('supervisor.%I', arch.name))
                     AND l.pid IS DISTINCT FROM pg_backend_pid()
                     AND (l.pid IS NULL  -- a prepared transaction
                          OR s.xact_start IS NULL  -- not ours to see: taken as long
                          OR s.state LIKE 'idle in transaction%'
                          OR s.xact_start < clock_timestamp() - interval '1 second')) THEN
            left_busy := left_busy + 1;
            CONTINUE;
        END IF;
        BEGIN
            PERFORM set_config('lock_timeout', '50ms', true);
            EXECUTE format('DROP TABLE IF EXISTS supervisor.%I', arch.name);
            DELETE FROM supervisor.job_archives WHERE name = arch.name;
            PERFORM set_config('lock_timeout', waited, true);
            dropped := dropped + 1;
        EXCEPTION WHEN lock_not_available THEN
            PERFORM set_config('lock_timeout', waited, true);
            left_busy := left_busy + 1;
        END;
    END LOOP;
END
$$;

-- Bring archived jobs back into the hot table (the same row, the same id) before
-- something makes them live again: a retry of a discarded or cancelled job. An
-- archive only holds its family's finished states (its CHECK), so an UPDATE that
-- made an archived row available in place would fail. Returns how many came back.
CREATE FUNCTION supervisor.unarchive_jobs(p_ids bigint[]) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    n integer;
BEGIN
    WITH gone AS (
        DELETE FROM supervisor.jobs j
        WHERE j.id = ANY (p_ids) AND j.tableoid <> 'supervisor.jobs'::regclass
        RETURNING j.*)
    INSERT INTO supervisor.jobs SELECT * FROM gone;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

-- The keyed claim (a queue with a per-key limit) as the baseline wrote it, but FROM ONLY
-- supervisor.jobs: a claim never reads the archives, and without ONLY its cached plans
-- locked every archive at each claim (see the header). The older signatures are unused.
CREATE OR REPLACE FUNCTION supervisor.claim_keyed(p_queue text, p_kinds text[], p_limit integer, p_per_key integer, p_owner text, p_ttl double precision, p_kind_attempts integer[], p_default_attempts integer, p_aging double precision, p_max_cpus integer, p_max_memory bigint, p_max_resources jsonb) RETURNS TABLE(id bigint, kind text, queue text, attempt integer, max_attempts integer, priority integer, timeout double precision, args text, wait double precision)
    LANGUAGE plpgsql
    AS $$
#variable_conflict use_column
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('supervisor.claim_keyed'), hashtext(p_queue));
    IF p_aging IS NULL OR p_aging <= 0 THEN
        RETURN QUERY
        WITH busy AS (
            SELECT r.concurrency_key AS key, count(*)::integer AS n
            FROM ONLY supervisor.jobs r
            WHERE r.state = 'running' AND r.queue = p_queue AND r.concurrency_key IS NOT NULL
            GROUP BY r.concurrency_key),
        -- Jobs of keys already at their limit are skipped in the ordered scan, so one busy
        -- key's backlog never hides the others' jobs. The window is wider than the claim
        -- because the per-key cap below may drop some of it.
        head AS (
            SELECT j.id AS jid, j.concurrency_key AS key, j.priority AS prio, j.run_at AS due
            FROM ONLY supervisor.jobs j
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
            UPDATE ONLY supervisor.jobs AS u
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
        (SELECT l.priority FROM ONLY supervisor.jobs l
         WHERE l.state = 'available' AND l.queue = p_queue ORDER BY l.priority LIMIT 1)
        UNION ALL
        SELECT (SELECT j.priority FROM ONLY supervisor.jobs j
                WHERE j.state = 'available' AND j.queue = p_queue AND j.priority > v.level
                ORDER BY j.priority LIMIT 1)
        FROM levels v WHERE v.level IS NOT NULL),
    busy AS (
        SELECT r.concurrency_key AS key, count(*)::integer AS n
        FROM ONLY supervisor.jobs r
        WHERE r.state = 'running' AND r.queue = p_queue AND r.concurrency_key IS NOT NULL
        GROUP BY r.concurrency_key),
    candidates AS (
        SELECT c.id AS cid FROM (
            SELECT j.id FROM ONLY supervisor.jobs j
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
            SELECT j.id FROM ONLY supervisor.jobs j
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
        FROM ONLY supervisor.jobs j
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
        UPDATE ONLY supervisor.jobs AS u
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
