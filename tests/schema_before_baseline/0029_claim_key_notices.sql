-- 0029: where a job became available in the claim order, told to the claim cursors
-- (issue 40).
-- A supervisor's plain claim starts its scan at its queue's cursor (the last key it
-- claimed: supervisor/engine/cursors.py), so that under a held MVCC horizon it does not
-- walk the index entries of the jobs claimed before. A job made available behind a cursor
-- must move it back: this channel carries the claim-order key of such jobs, delivered at
-- commit (so a producer's transaction committed late is told when it commits).
-- Payload: queue, priority and run_at (epoch seconds), tab-separated; the queue first,
-- so a queue name with a tab still parses from the right. The hot 'supervisor_jobs'
-- wake-up is unchanged; an insert statement sends one key per queue (its first job in
-- claim order), not one per row.

CREATE OR REPLACE FUNCTION supervisor.notify_inserted_jobs() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    q text;
    k record;
BEGIN
    -- Statement-level with a transition table: a 20k-row COPY costs one small loop over
    -- its distinct queues, not 20k function calls.
    FOR k IN SELECT DISTINCT ON (queue) queue, priority, run_at FROM new_jobs
             WHERE state = 'available' ORDER BY queue, priority, run_at LOOP
        PERFORM pg_notify('supervisor_jobs', k.queue);
        PERFORM pg_notify('supervisor_job_keys', k.queue || chr(9) || k.priority || chr(9)
                                                 || extract(epoch FROM k.run_at));
    END LOOP;
    FOR q IN SELECT DISTINCT queue FROM new_jobs WHERE state = 'scheduled' LOOP
        PERFORM pg_notify('supervisor_scheduled', q);
    END LOOP;
    RETURN NULL;
END
$$;

CREATE FUNCTION supervisor.notify_job_key() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('supervisor_job_keys', NEW.queue || chr(9) || NEW.priority || chr(9)
                                             || extract(epoch FROM NEW.run_at));
    RETURN NULL;
END
$$;

-- Promotions, releases, rescues and retries back to available, and an available job
-- moved earlier in the claim order (a priority raised, run_at set back). The WHEN clause
-- keeps claims and completions (the hot updates) from calling the function at all.
CREATE TRIGGER jobs_notify_key
    AFTER UPDATE OF state, priority, run_at ON supervisor.jobs
    FOR EACH ROW
    WHEN (NEW.state = 'available'
          AND (OLD.state IS DISTINCT FROM 'available' OR NEW.priority < OLD.priority
               OR NEW.run_at < OLD.run_at))
    EXECUTE FUNCTION supervisor.notify_job_key();
