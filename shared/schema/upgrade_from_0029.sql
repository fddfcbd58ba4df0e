-- Carries a database that the migrations before the baseline (0001-0029, now folded
-- into 0030_baseline.sql) took to 0029 into the baseline's shape. Every row stays where
-- it is: 0030 is 0029's schema folded plus storage settings of supervisor.jobs, key
-- notices that name their batch and a batch close that probes from the highest member
-- down, so this checks that the database is what its supervisor.migrations says (0029's
-- last objects present) and sets those. SET of the storage parameters takes SHARE UPDATE
-- EXCLUSIVE; building jobs_batch_open_idx again blocks the queue's writes while it runs
-- (it holds the waiting batch members only: seconds for a million).
DO $$
BEGIN
    IF to_regprocedure('supervisor.notify_job_key()') IS NULL
       OR to_regclass('supervisor.jobs') IS NULL THEN
        RAISE EXCEPTION 'supervisor.migrations says 0029 but its objects are missing';
    END IF;
END
$$;

-- The storage settings the baseline gives supervisor.jobs (see 0030_baseline.sql), in
-- its order (pg_dump prints them as stored): new pages are filled to 70%, existing ones
-- stay as they are.
ALTER TABLE supervisor.jobs SET (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_insert_scale_factor = 0.01,
    autovacuum_analyze_scale_factor = 0.01);

-- The keys channel's notices name the lowest batch they made a member available in (the
-- baseline's), which a fair claim's walk of the batches moves back to.
CREATE OR REPLACE FUNCTION supervisor.notify_inserted_jobs() RETURNS trigger
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

CREATE OR REPLACE FUNCTION supervisor.notify_job_key() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify('supervisor_job_keys', NEW.queue || chr(9) || NEW.priority || chr(9)
                                             || extract(epoch FROM NEW.run_at) || chr(9)
                                             || 'b' || coalesce(NEW.batch_id::text, ''));
    RETURN NULL;
END
$$;

-- A batch's close probes its open members from the highest id down (the baseline's):
-- under a held horizon, from the lowest up it walked every finished member's entries.
DROP INDEX supervisor.jobs_batch_open_idx;
CREATE INDEX jobs_batch_open_idx ON supervisor.jobs USING btree (batch_id, id) WHERE ((batch_id IS NOT NULL) AND (state = ANY (ARRAY['available'::text, 'scheduled'::text, 'running'::text, 'retryable'::text])));

CREATE OR REPLACE FUNCTION supervisor.jobs_after_update() RETURNS trigger
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

-- jobs_fair_idx's predicate tests the state through an expression (the baseline's), so
-- only the fair claim's scans, written the same way, can use it, and those scans cannot
-- use jobs_available_idx: with the two equally cheap by the statistics, a cached plan
-- walked jobs_available_idx, with every member claimed since a hold began.
DROP INDEX supervisor.jobs_fair_idx;
CREATE INDEX jobs_fair_idx ON supervisor.jobs USING btree (queue, batch_id, priority, run_at, id) WHERE (((state || ''::text) = 'available'::text) AND (batch_id IS NOT NULL));
