-- Carries a database that the migrations before the baseline (0001-0029, now folded
-- into 0030_baseline.sql) took to 0029 into the baseline's shape. Every row stays where
-- it is: 0030 is 0029's schema folded, so this only checks that the database is what
-- its supervisor.migrations says (0029's last objects present) before 0030 is recorded.
DO $$
BEGIN
    IF to_regprocedure('supervisor.notify_job_key()') IS NULL
       OR to_regclass('supervisor.jobs') IS NULL THEN
        RAISE EXCEPTION 'supervisor.migrations says 0029 but its objects are missing';
    END IF;
END
$$;
