-- Carries a database that the migrations before the baseline (0001-0029, now folded
-- into 0030_baseline.sql) took to 0029 into the baseline's shape. Every row stays where
-- it is: 0030 is 0029's schema folded plus storage settings of supervisor.jobs, so this
-- checks that the database is what its supervisor.migrations says (0029's last objects
-- present) and sets those. SET of these parameters takes SHARE UPDATE EXCLUSIVE: the
-- queue's reads and writes go on meanwhile.
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
