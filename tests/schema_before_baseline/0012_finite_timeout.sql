-- 0012: a job's timeout is a finite number of seconds (issue 30).
-- The CHECK of 0001 (timeout > 0) admits NaN (greater than every number in PostgreSQL)
-- and Infinity, which plain-SQL producers can write and nothing can honour. New and
-- updated rows are refused from now on; rows already there are left as they are (NOT
-- VALID: no scan of the table, no rewrite of anyone's data) and shown as they are.
ALTER TABLE supervisor.jobs
    ADD CONSTRAINT jobs_timeout_finite
    CHECK (timeout IS NULL OR (timeout > 0 AND timeout < 'Infinity'::float8)) NOT VALID;
