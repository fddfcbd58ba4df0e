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
