-- 0009: dependencies that never make the parent wait on a producer, and fan-in in
-- linear time (issue 24).
--
-- Until 0008 a producer marked each dependency `watched` with an UPDATE inside its own
-- transaction: the dependency's row stayed locked for as long as that transaction stayed
-- open, and the supervisor running the dependency could neither complete it nor renew
-- its lease (nor claim, since claims carry completions) meanwhile. And each dependency
-- that completed re-read every dependency of its dependents, so one job waiting for N
-- others cost O(N^2).
--
-- Now:
--  * supervisor.job_dependencies holds one edge per dependency a held job still waits
--    for; a dependency that becomes final consumes (deletes) its edges, exactly once.
--  * supervisor.dependents holds, per held job, how many edges it has left: completing
--    one dependency is one decrement, so N dependencies cost O(N) in all.
--  * The producer reads its dependencies' states without a lock, and writes the job, its
--    edges and its dependents row. Only at its COMMIT does a deferred trigger lock the
--    dependencies (NOWAIT, retried: it never waits while holding one), mark them watched
--    and settle the edges of dependencies that became final meanwhile. A supervisor
--    completing a dependency either commits first (the settlement sees it final) or waits
--    for the producer's commit, which is already under way, and then sees the edge.

CREATE TABLE supervisor.job_dependencies (
    dependency_id bigint NOT NULL,   -- the job waited for
    dependent_id  bigint NOT NULL,   -- the held job
    PRIMARY KEY (dependency_id, dependent_id)
);
CREATE INDEX job_dependencies_dependent_idx ON supervisor.job_dependencies (dependent_id);
COMMENT ON TABLE supervisor.job_dependencies IS
    'Dependencies a held job still waits for; consumed when the dependency becomes final.';

CREATE TABLE supervisor.dependents (
    id      bigint PRIMARY KEY,                        -- the held job
    pending integer NOT NULL CHECK (pending >= 0),     -- its edges not consumed yet
    settled boolean NOT NULL DEFAULT false             -- checked under lock at its commit
) WITH (fillfactor = 70);  -- room for HOT updates: each completed dependency decrements
CREATE INDEX dependents_unsettled_idx ON supervisor.dependents (id) WHERE NOT settled;
COMMENT ON TABLE supervisor.dependents IS
    'Held jobs (depends_on) and how many dependencies each still waits for.';

-- Jobs held by 0008's code: their edges are the dependencies not completed yet (a
-- dependency gone from the table counted as completed there, and still does).
INSERT INTO supervisor.job_dependencies (dependency_id, dependent_id)
SELECT DISTINCT x.id, j.id
FROM supervisor.jobs j CROSS JOIN LATERAL unnest(j.depends_on) AS dep(id)
JOIN supervisor.jobs x ON x.id = dep.id AND x.state <> 'completed'
WHERE j.state = 'scheduled' AND j.depends_on IS NOT NULL;
INSERT INTO supervisor.dependents (id, pending, settled)
SELECT dependent_id, count(*), true FROM supervisor.job_dependencies GROUP BY dependent_id;
UPDATE supervisor.jobs j SET state = 'available', run_at = now()
WHERE j.state = 'scheduled' AND j.depends_on IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM supervisor.dependents d WHERE d.id = j.id);

-- The GIN index found dependents by rescanning arrays; the edges' primary key does now.
DROP INDEX IF EXISTS supervisor.jobs_depends_on_idx;

-- A held job may run: every dependency completed.
CREATE FUNCTION supervisor.release_dependent(p_id bigint) RETURNS void
LANGUAGE sql AS $$
    DELETE FROM supervisor.dependents WHERE id = p_id;
    UPDATE supervisor.jobs SET state = 'available', run_at = now()
    WHERE id = p_id AND state = 'scheduled';
$$;

-- A held job never will: dependency p_dep ended p_how (discarded, cancelled, or gone).
-- Its cancellation is itself a final update, so its own dependents follow.
CREATE FUNCTION supervisor.cancel_dependent(p_id bigint, p_dep bigint, p_how text)
RETURNS void
LANGUAGE sql AS $$
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

-- 0006's trigger with its dependents part rewritten: batches and waiters unchanged.
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
                   WHERE n.state IN ('completed', 'discarded', 'cancelled')
                     AND (n.batch_id IS NOT NULL OR n.watched)) THEN
        RETURN NULL;
    END IF;

    -- Batches: each batch touched takes its own lock (not a row: nothing is updated per
    -- member), then one index probe decides whether it was the last. Locks in id order,
    -- so two statements closing members of the same batches cannot deadlock. The probe
    -- is a new statement, so it sees every transaction that held the lock before us.
    FOR b IN SELECT DISTINCT n.batch_id FROM new_rows n JOIN old_rows o ON o.id = n.id
             WHERE n.batch_id IS NOT NULL
               AND n.state IN ('completed', 'discarded', 'cancelled')
               AND o.state NOT IN ('completed', 'discarded', 'cancelled')
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

    -- Watched rows: wake their waiters, then settle their dependents.
    SELECT array_agg(n.id ORDER BY n.id) INTO done
    FROM new_rows n JOIN old_rows o ON o.id = n.id
    WHERE n.watched AND n.state IN ('completed', 'discarded', 'cancelled')
      AND o.state NOT IN ('completed', 'discarded', 'cancelled');
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

-- At the producer's commit: lock every dependency of the jobs it holds back, mark them
-- watched, and settle what became final since the producer read them. One run settles
-- every unsettled dependent of the transaction (the others find none left), so the
-- locks are taken all at once: with NOWAIT in a subtransaction, retried after a short
-- sleep, the producer never waits while holding a dependency's lock, and a supervisor
-- writing a dependency waits at most for the rest of this commit. After about a second
-- of refusals it waits like any writer (a dependency locked by someone else for long).
CREATE FUNCTION supervisor.settle_dependents() RETURNS trigger
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
                    FILTER (WHERE x.id IS NULL OR x.state IN ('discarded', 'cancelled')))[1]
                   AS failed,
               (array_agg(coalesce('ended ' || x.state, 'no longer exists')
                          ORDER BY e.dependency_id)
                    FILTER (WHERE x.id IS NULL OR x.state IN ('discarded', 'cancelled')))[1]
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

CREATE CONSTRAINT TRIGGER dependents_settle
    AFTER INSERT ON supervisor.dependents
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION supervisor.settle_dependents();
