-- 0025: a batch acted on as one thing, and a failure budget (issue 42).
--
--  * supervisor.batches gets the budget (max_failures, max_failure_rate), two counters
--    kept only for batches with a budget (failed attempts, completed members), and
--    the stop (stopped_at, stop_kind 'cancelled' or 'aborted', stop_reason) and pause
--    (paused_at) marks. Every column is nullable or has a constant default: adding them
--    rewrites no row, so the migration is instant on a table holding rows.
--  * A member of a stopped or paused batch is never claimed: a BEFORE UPDATE row
--    trigger, whose WHEN clause lets every other row through without a call, drops the
--    claim of such a member (the claim returns fewer rows) and notes the batch in a
--    transaction-local setting; the statement's AFTER trigger then settles one capped
--    chunk of that batch's waiting members (cancelled, or held back for a pause). So
--    from the commit of a stop, no member starts, even before every member was
--    written, and a stop whose writer died is finished by the claims that meet it.
--  * supervisor.batch_drain(b, cap, wait_running) settles one chunk: for a stopped
--    batch, running members are cancelled and their supervisors told (NOTIFY
--    supervisor_cancel, as `jobs cancel` does), then waiting members cancelled; for a
--    paused batch, waiting members are held ('scheduled' at 9999-12-30: a day before a
--    held dependent's 9999-12-31, so `status` does not count them as waiting for their
--    dependencies). Callers loop over it, one short transaction a chunk.
--  * The budget: the statement trigger counts, per batch with a budget, the attempts
--    that failed (running -> retryable or discarded) and the members that completed;
--    the failure that reaches the budget stops the batch as 'aborted' with its reason
--    and settles its running members and a first chunk of waiting ones. The batch then
--    closes as before (0006): the callback is enqueued once, by the transaction that
--    makes the last member final.

ALTER TABLE supervisor.batches
    ADD COLUMN max_failures integer CHECK (max_failures >= 1),
    ADD COLUMN max_failure_rate double precision
        CHECK (max_failure_rate > 0 AND max_failure_rate <= 1),
    ADD COLUMN failures integer NOT NULL DEFAULT 0,
    ADD COLUMN successes integer NOT NULL DEFAULT 0,
    ADD COLUMN stopped_at timestamptz,
    ADD COLUMN stop_kind text CHECK (stop_kind IN ('cancelled', 'aborted')),
    ADD COLUMN stop_reason text CHECK (char_length(stop_reason) <= 1000),
    ADD COLUMN paused_at timestamptz;
COMMENT ON COLUMN supervisor.batches.failures IS
    'Failed attempts of members (running -> retryable or discarded); counted only when the batch has a budget.';

-- One chunk of a stopped or paused batch settled; returns how many rows it changed.
-- wait_running: wait for a running member's row lock (an operator's cancel, holding no
-- batch lock) or skip it (inside a trigger, which may hold the batch's advisory lock
-- while a completing supervisor holds the row and waits for that lock).
CREATE FUNCTION supervisor.batch_drain(b bigint, cap integer, wait_running boolean)
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
                                  AND run_at <> '9999-12-30 00:00:00+00'))
                       LIMIT cap FOR UPDATE SKIP LOCKED))
          AND j.state IN ('available', 'retryable', 'scheduled');
        GET DIAGNOSTICS n = ROW_COUNT;
        RETURN n;
    END IF;
    RETURN 0;
END
$$;

-- Stop a batch ('cancelled' or 'aborted'); true when this call stopped it. The caller
-- holds the batch's advisory lock, so the stop and the closing check never cross.
CREATE FUNCTION supervisor.batch_stop(b bigint, kind text, reason text)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    UPDATE supervisor.batches
    SET stopped_at = now(), stop_kind = kind, stop_reason = left(reason, 1000)
    WHERE id = b AND stopped_at IS NULL AND finished_at IS NULL;
    RETURN FOUND;
END
$$;

CREATE FUNCTION supervisor.jobs_batch_claim_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
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

CREATE TRIGGER jobs_batch_claim_guard
    BEFORE UPDATE OF state ON supervisor.jobs
    FOR EACH ROW
    WHEN (NEW.batch_id IS NOT NULL AND NEW.state = 'running' AND OLD.state <> 'running')
    EXECUTE FUNCTION supervisor.jobs_batch_claim_guard();

-- 0021's trigger with the budget and the settling of a batch a claim met stopped.
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