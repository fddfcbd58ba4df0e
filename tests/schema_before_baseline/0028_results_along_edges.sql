-- 0028: results along edges, edges that run anyway, an error callback (issue 42).
--
--  * An edge may allow its dependency to fail (`Dep(id, allow_failure=True)`):
--    supervisor.job_dependencies.allow_failure. When such a dependency ends discarded,
--    cancelled or expired (or is gone at the producer's commit), its edge is consumed as
--    if it had completed, so the dependent runs and reads how it ended; an edge without
--    it cancels the dependent as before (0009).
--  * A dependent may name its dependencies (`Dep(id, name="split")`, or depends_on as a
--    mapping): supervisor.jobs.dependency_names, a JSON object name -> id, written with
--    the job, NULL when no edge is named (adding a nullable column rewrites no row).
--    With jobs.depends_on (every dependency, kept after the edges are consumed) it is
--    what `current_job().dependencies()` reads.
--  * A batch may have an error callback (`on_failure=`): supervisor.batches.on_failure
--    (kind, queue, args, priority, max_attempts, timeout as JSON). When the batch
--    closes, a stopped batch or one with a member not completed enqueues it instead
--    of `then` (called_on_failure says which ran); a batch without one calls `then`
--    whatever its members did, as before.
--  * A batch's members may wait for dependencies (`enqueue_many(depends_on=...)`): a
--    pause no longer takes a member held for its dependencies (run_at 9999-12-31) into
--    the pause's hold (9999-12-30), from where a resume would have released it early.
--
--  * Batch rows are pruned with their members: an index on finished_at for it.
--  * A queue may serve its batches round-robin: an index of waiting batch members.
--
-- jobs_after_update is 0025's with the two changes marked; settle_dependents is 0021's
-- with allow_failure and a first probe by primary key (many held jobs in one commit); batch_drain is 0025's with the pause's condition narrowed.

ALTER TABLE supervisor.job_dependencies
    ADD COLUMN allow_failure boolean NOT NULL DEFAULT false;
ALTER TABLE supervisor.jobs ADD COLUMN dependency_names jsonb
    CHECK (dependency_names IS NULL OR jsonb_typeof(dependency_names) = 'object');
ALTER TABLE supervisor.batches
    ADD COLUMN on_failure jsonb CHECK (on_failure IS NULL OR (
        jsonb_typeof(on_failure) = 'object' AND on_failure ? 'kind' AND on_failure ? 'queue')),
    ADD COLUMN called_on_failure boolean NOT NULL DEFAULT false;
-- A fair queue's claim (a queue's `fair = "batch"`, supervisor/db/claim.py) finds the
-- batches with waiting jobs in the queue by a loose scan, one probe per batch, and
-- each one's next jobs in priority order. Partial: only waiting batch members are in
-- it, so jobs of no batch pay nothing, and a member pays one entry while it waits.
CREATE INDEX jobs_fair_idx ON supervisor.jobs (queue, batch_id, priority, run_at, id)
    WHERE state = 'available' AND batch_id IS NOT NULL;

-- Maintenance prunes finished batches whose members and callback were pruned
-- (supervisor.db.sql.PRUNE_BATCHES): found by when they finished.
CREATE INDEX batches_finished_idx ON supervisor.batches (finished_at)
    WHERE finished_at IS NOT NULL;
COMMENT ON COLUMN supervisor.batches.on_failure IS
    'The error callback (kind, queue, args, priority, max_attempts, timeout): enqueued instead of the callback when a member did not complete or the batch was stopped.';

CREATE OR REPLACE FUNCTION supervisor.batch_drain(b bigint, cap integer, wait_running boolean)
RETURNS integer LANGUAGE plpgsql AS $$
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

CREATE OR REPLACE FUNCTION supervisor.jobs_after_update() RETURNS trigger
LANGUAGE plpgsql AS $$
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
        CONTINUE WHEN EXISTS (
            SELECT 1 FROM supervisor.jobs j WHERE j.batch_id = b
              AND j.state IN ('available', 'scheduled', 'running', 'retryable'));
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

CREATE OR REPLACE FUNCTION supervisor.settle_dependents() RETURNS trigger
LANGUAGE plpgsql AS $$
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
