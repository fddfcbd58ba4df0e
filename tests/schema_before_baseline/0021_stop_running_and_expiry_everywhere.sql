-- 0021: the gaps left in issue 28 (long jobs through drains and deploys).
--
--  * `supervisor queues pause NAME --stop-running`: the pause row says whether the jobs
--    of the queue that already run are to be stopped too. Supervisors learn it through
--    0004's 'supervisor_paused' channel (also when a queue paused already gets the flag),
--    send those jobs the stop notice and give them back unspent. Resuming clears it.
--  * Expiry (0016) with batches and depends_on: 'expired' is a final state for the batch
--    and dependency triggers of 0006/0009. An expired batch member counts as final (the
--    batch closes and its callback is enqueued, as for a discarded member); an expired
--    dependency cancels its dependents, as a discarded one does ("dependency N ended
--    expired"); a held dependent that expires drops its edges and counter.
--  * The keyed claims (0007, 0011) skip jobs past their expires_at, as the plain claim
--    does since 0016; the maintenance sweep marks them expired.

ALTER TABLE supervisor.queues ADD COLUMN stop_running boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN supervisor.queues.stop_running IS
    'Paused with --stop-running: its running jobs are told to stop and go back unspent.';

-- A queue paused already that is now paused with --stop-running: wake the supervisors
-- again (0004's triggers fire only when paused turns true). Same channel and payload, so
-- a supervisor reads the row and finds the flag.
CREATE TRIGGER queues_notify_stop_running
    AFTER UPDATE OF stop_running ON supervisor.queues
    FOR EACH ROW
    WHEN (NEW.paused AND NEW.stop_running AND NOT OLD.stop_running)
    EXECUTE FUNCTION supervisor.notify_paused_queue();

-- 0007's keyed claim with the expiry rule.
CREATE OR REPLACE FUNCTION supervisor.claim_keyed(
    p_queue text, p_kinds text[], p_limit integer, p_per_key integer, p_owner text,
    p_ttl double precision, p_kind_attempts integer[], p_default_attempts integer)
RETURNS TABLE (id bigint, kind text, queue text, attempt integer, max_attempts integer,
               priority integer, timeout double precision, args text,
               wait double precision)
LANGUAGE plpgsql VOLATILE AS $$
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

-- 0011's aged keyed claim with the expiry rule.
CREATE OR REPLACE FUNCTION supervisor.claim_keyed(
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

-- 0009's trigger, 'expired' counted among the final states (see above).
CREATE OR REPLACE FUNCTION supervisor.jobs_after_update() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    b      bigint;
    bt     supervisor.batches%ROWTYPE;
    cb     bigint;
    r      record;
    left_  integer;
    done   bigint[];
BEGIN
    -- The hot path: claims, renewals and completions of plain jobs stop here after one
    -- scan of the statement's own rows.
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
        CONTINUE WHEN EXISTS (
            SELECT 1 FROM supervisor.jobs j WHERE j.batch_id = b
              AND j.state IN ('available', 'scheduled', 'running', 'retryable'));
        SELECT * INTO bt FROM supervisor.batches WHERE id = b AND finished_at IS NULL;
        CONTINUE WHEN NOT FOUND;
        cb := NULL;
        IF bt.callback_kind IS NOT NULL THEN
            INSERT INTO supervisor.jobs (kind, queue, args, priority, max_attempts, timeout)
            VALUES (bt.callback_kind, bt.callback_queue, bt.callback_args,
                    bt.callback_priority, bt.callback_max_attempts, bt.callback_timeout)
            RETURNING id INTO cb;
        END IF;
        UPDATE supervisor.batches SET finished_at = now(), callback_id = cb WHERE id = b;
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
            RETURNING e.dependency_id, e.dependent_id)
        SELECT g.dependent_id AS id,
               count(*) FILTER (WHERE n.state = 'completed')::integer AS completed,
               (array_agg(n.id ORDER BY n.id) FILTER (WHERE n.state <> 'completed'))[1]
                   AS failed,
               (array_agg(n.state ORDER BY n.id) FILTER (WHERE n.state <> 'completed'))[1]
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

-- 0009's settlement at the producer's commit: a dependency expired meanwhile cancels.
CREATE OR REPLACE FUNCTION supervisor.settle_dependents() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    deps  bigint[];
    tries integer := 0;
    r     record;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM supervisor.dependents WHERE NOT settled) THEN
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
               count(*) FILTER (WHERE x.state = 'completed')::integer AS completed,
               (array_agg(e.dependency_id ORDER BY e.dependency_id)
                    FILTER (WHERE x.id IS NULL OR x.state IN ('discarded', 'cancelled', 'expired')))[1]
                   AS failed,
               (array_agg(coalesce('ended ' || x.state, 'no longer exists')
                          ORDER BY e.dependency_id)
                    FILTER (WHERE x.id IS NULL OR x.state IN ('discarded', 'cancelled', 'expired')))[1]
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
            DELETE FROM supervisor.job_dependencies e USING supervisor.jobs x
            WHERE e.dependent_id = r.id AND x.id = e.dependency_id
              AND x.state = 'completed';
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
